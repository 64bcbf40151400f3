"""Shared by the experiments (files starting with _ are not experiments)."""
from __future__ import annotations

import csv
from pathlib import Path


def write_csv(path: Path, rows: list[dict]) -> Path:
    """Rows (dicts with the same keys) as a CSV with a header; return the path."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def save_figure(fig, path: Path) -> Path:
    """Lay out, write as PNG (110 dpi, every experiment's), close; return the path."""
    import matplotlib.pyplot as plt
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
