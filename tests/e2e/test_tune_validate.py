"""`fabric tune --validate` on leaf-spine: the fabric started, its round
trip probed, the values derived from it written on the live switches and
judged by three checks (incast into the lossless class, a congested port, a
watchdog storm) in under two minutes, each check's verdict naming the
parameter it judges and the exit code following them; then fabric train's
hand-set lossless values validated on the same dilation: an incast loses no
lossless packet and a stuck NIC's storm is declared within detect_ms plus
the stated margin."""
import re
import subprocess
import sys
from pathlib import Path

import yaml

from features import load_topology
from experiments.tuning import STORM_DETECT_MARGIN_MS

REPO = Path(__file__).resolve().parents[2]


def tune(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabric.cli", "tune", "--topology", "leaf-spine", "--validate", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=600)


def test_derived_values_are_validated_live_and_each_verdict_names_its_parameter(tmp_path):
    out = tmp_path / "tuned.yaml"
    proc = tune("--out", str(out))
    text = proc.stdout
    assert proc.returncode in (0, 1), text[-3000:] + proc.stderr[-3000:]
    assert "validating with fabric train's (class 3 'collective', DSCP 26)" in text
    dilation = float(re.search(r"fabric tune: dilation (?:x([0-9.]+)|none)", text).group(1) or 1)
    assert re.search(r"round trip h1 -> h3 \(3 switches\), \d+ pings: p50 [0-9.]+ ms, p90 [0-9.]+ ms", text)
    assert "rtt = " in text and "probed: p90 of" in text                 # derived from the probe
    verdicts = re.findall(r"^(PASS|FAIL) (incast into the lossless class|congested port|watchdog storm): ", text, re.M)
    assert [name for _, name in verdicts] == ["incast into the lossless class", "congested port", "watchdog storm"]
    failed = [name for verdict, name in verdicts if verdict == "FAIL"]
    assert proc.returncode == (1 if failed else 0)
    for line in text.splitlines():                                       # each failure names its parameter
        if line.startswith("     ") and " is too " in line:
            assert re.match(r"\s+(lossless\.|ecn\.|dcqcn)", line), line
    took = int(re.search(r"validation: \d of 3 checks passed in (\d+) s", text).group(1))
    assert took < 120
    written = yaml.safe_load(out.read_text())
    assert f"--validate --dilation {dilation:g}" in out.read_text().splitlines()[0]
    assert set(written) == {"lossless", "ecn"} and written["lossless"]["pfc"]["headroom"] >= 1

    hand = tmp_path / "hand.yaml"          # fabric train's section, its hold loop at the dilated link's rate
    link_pps = round(8333 / dilation)
    hand.write_text(yaml.safe_dump({"lossless": {"queues": 8, "hold_rate_pps": link_pps, "classes": [
        {"name": "collective", "class": 3, "dscp": [26], "lossless": True}],
        "pfc": {"xoff": 24, "xon": 12, "headroom": 64}}}))
    load_topology("leaf-spine", overlays=[hand])
    proc = tune(str(hand), "--dilation", f"{dilation:g}", "--checks", "incast", "storm")
    text = proc.stdout
    assert proc.returncode == 0, text[-3000:] + proc.stderr[-3000:]
    assert "pfc xoff 24, xon 12, headroom 64" in text
    incast = re.search(r"PASS incast into the lossless class: .*: (\d+) of (\d+) received .*, 0 missing", text)
    assert incast and int(incast.group(1)) == int(incast.group(2)) > 0
    storm = re.search(r"PASS watchdog storm: .* after (\d+) ms", text)
    assert storm and 200 <= int(storm.group(1)) <= 200 + STORM_DETECT_MARGIN_MS
