"""Shared by the experiments (files starting with _ are not experiments)."""
from __future__ import annotations

from pathlib import Path


def save_figure(fig, path: Path) -> Path:
    """Lay out, write as PNG (110 dpi, every experiment's), close; return the path."""
    import matplotlib.pyplot as plt
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
