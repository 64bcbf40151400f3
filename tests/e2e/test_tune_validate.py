"""`fabric tune --validate` on leaf-spine: the fabric started, its round
trip and its pause response probed, the values derived from them written on
the live switches and judged green by three checks (an incast into the
lossless class, a congested port, a watchdog storm) in under two minutes;
then the same overlay with its headroom halved fails, naming the headroom.
On fat-tree-k4: derived from its own probes (five switches a round trip),
and its incast into the lossless class validates green (the congested port
and the storm, judged on leaf-spine, add 45 s here)."""
import re
import subprocess
import sys
from pathlib import Path

import yaml

from experiments.tuning import REFINE_ROUNDS
from features import load_topology

REPO = Path(__file__).resolve().parents[2]


def tune(*args: str, topology: str = "leaf-spine") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabric.cli", "tune", "--topology", topology, "--validate", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=600)


def test_derived_values_validate_green_and_a_halved_headroom_fails_naming_it(tmp_path):
    out = tmp_path / "tuned.yaml"
    proc = tune("--out", str(out))
    text = proc.stdout
    assert proc.returncode == 0, text[-4000:] + proc.stderr[-3000:]
    assert "validating with fabric train's (class 3 'collective', DSCP 26)" in text
    dilation = float(re.search(r"fabric tune: dilation (?:x([0-9.]+)|none)", text).group(1) or 1)
    assert re.search(r"round trip h1 -> h3 \(3 switches\), \d+ pings: p50 [0-9.]+ ms, p90 [0-9.]+ ms", text)
    beyond = int(re.search(r"at most (\d+) packets arrived after a pause", text).group(1))
    assert "probed: p90 of" in text                                      # the RTT the derivation used
    checks = ["incast into the lossless class", "congested port", "watchdog storm"]
    verdicts = re.findall(r"^(PASS|FAIL) (incast into the lossless class|congested port|watchdog storm): ", text, re.M)
    # a check that judged a value derived from t_hop wrong (the probe's figure is one sample of a tail: 3 of 15
    # runs plus CI's; docs/tuning.md) is followed by the values derived again with t_hop doubled, and every check
    # again: each refined round is the checks in order up to the one that failed
    refined = re.findall(r"^refined: (lossless\.pfc\.headroom|lossless\.pfc_ports|lossless\.pfc\.xon) judged wrong, "
                         r"derived again with t_hop doubled", text, re.M)
    assert len(refined) <= REFINE_ROUNDS
    rounds, current = [], []
    for verdict, check in verdicts:
        current.append((verdict, check))
        if verdict == "FAIL":
            rounds.append(current)
            current = []
    assert len(rounds) == len(refined) and current == [("PASS", c) for c in checks], text[-4000:]
    for failed in rounds:
        assert failed == [("PASS", c) for c in checks[:len(failed) - 1]] + [("FAIL", checks[len(failed) - 1])], \
            text[-4000:]
    if refined:
        print(f"refined {len(refined)} time(s): {refined}")
    incast = re.search(r"PASS incast into the lossless class: .*: (\d+) of (\d+) received, utilisation ([0-9.]+), "
                       r"0 missing", text)
    assert incast and int(incast.group(1)) == int(incast.group(2)) > 0
    took = int(re.search(r"validation: 3 of 3 checks passed in (\d+) s", text).group(1))
    assert took < 120 * (1 + len(refined))          # under two minutes a round of checks
    written = yaml.safe_load(out.read_text())
    assert f"--validate --dilation {dilation:g}" in out.read_text().splitlines()[0]
    assert set(written) == {"lossless", "ecn", "congestion_control"}
    assert written["lossless"]["pfc"]["headroom"] >= beyond
    # the congestion controls' constants say the dilation they were derived at (never dilated twice)
    assert written["congestion_control"]["dilation"] == dilation and {"dcqcn", "hpcc", "timely", "swift"} <= set(
        written["congestion_control"])

    halved = tmp_path / "halved.yaml"
    headroom = written["lossless"]["pfc"]["headroom"] // 2
    written["lossless"]["pfc"]["headroom"] = max(1, headroom)
    halved.write_text(yaml.safe_dump(written))
    load_topology("leaf-spine", overlays=[halved])
    proc = tune(str(halved), "--dilation", f"{dilation:g}", "--checks", "incast")
    text = proc.stdout
    # What arrives after a pause varies from run to run (docs/tuning.md: 0-5 packets in 4 s probes): the
    # halved headroom fails when this run's probe or incast saw more than it holds (2 of 2 runs); a run
    # that saw no more must pass, and says so in its figures.
    probe = int(re.search(r"at most (\d+) packets arrived after a pause", text).group(1))
    seen = int(re.search(r"at most (\d+) beyond XOFF", text).group(1))
    if max(probe, seen) > max(1, headroom):
        assert proc.returncode == 1, text[-3000:] + proc.stderr[-3000:]
        assert f"lossless.pfc.headroom = {max(1, headroom)} packets" in text and " is too small: " in text
        assert re.search(r"validation: 0 of 1 checks passed in \d+ s; wrong: lossless.pfc.headroom", text)
    else:
        # nothing arrived beyond the halved headroom: it is not blamed, and nothing went missing. The same
        # incast also judges XON by the link's use (>= 0.75): with the halved headroom's tighter cells a
        # run may miss it (0.71 in CI's run of 2026-11-29, at XON 1 before XON gained its packet).
        assert "0 missing" in text and "wrong: lossless.pfc.headroom" not in text, text[-3000:]
        assert proc.returncode == 0 or re.search(r"wrong: lossless\.pfc\.xon = \d+ packets$", text, re.M), \
            text[-3000:]


def test_fat_tree_k4_derives_from_its_own_probes_and_its_incast_validates_green(tmp_path):
    """20 switches on two cores: the calibration dilates them (x40.5 on the tests' BMv2 build). Judged by PSI
    the incast ran unfaithfully in 4 runs of 4 (threads waited for a core 54-57% of it; docs/tuning.md); by
    the cores' idle share (since 2026-11-30) it was faithful in 3 of 3 whole validations on the fast build.
    What is judged is the outcome: every lossless packet received, the run's verdict said. 38-42 s a run."""
    out = tmp_path / "tuned.yaml"
    proc = tune("--checks", "incast", "--out", str(out), topology="fat-tree-k4")
    text = proc.stdout
    assert proc.returncode == 0, text[-4000:] + proc.stderr[-3000:]
    assert re.search(r"round trip h1 -> h5 \(5 switches\), \d+ pings: p50 [0-9.]+ ms, p90 [0-9.]+ ms", text), \
        text[-4000:]
    probe = re.search(r"at most (\d+) packets arrived after a pause", text)
    assert probe, text[-4000:]
    beyond = int(probe.group(1))
    incast = re.search(r"^PASS incast into the lossless class: 4 senders \(h1, h3, h7, h10\) -> h5 .*: (\d+) of (\d+) "
                       r"received, utilisation ([0-9.]+), 0 missing at the receiver, 0 headroom drops", text, re.M)
    assert incast and int(incast.group(1)) == int(incast.group(2)) > 0, text[-4000:]
    assert re.search(r"fidelity (ok|violated: )", text)
    assert re.search(r"validation: 1 of 1 checks passed in \d+ s", text)
    written = yaml.safe_load(out.read_text())
    assert set(written) == {"lossless", "ecn", "congestion_control"}
    assert written["lossless"]["pfc"]["headroom"] >= beyond
