"""`make run` non-interactively on leaf-spine: builds, starts 4 BMv2
switches, programs them, pings all pairs across the spines, exits 0 and
leaves nothing behind; the fat tree and the small topologies beyond Clos
reach every pair too."""
import subprocess
from pathlib import Path


from features import load_topology

REPO = Path(__file__).resolve().parents[2]


def leftovers(topo) -> list[str]:
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    found += [f"netns {h}" for h in topo.hosts if h in netns]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found += [f"veth {p.iface}" for s in topo.switches.values() for p in s.ports.values() if f" {p.iface}@" in links]
    procs = subprocess.run(["pgrep", "-f", "simple_switch_grpc --device-id"], capture_output=True, text=True).stdout
    found += [f"process {pid}" for pid in procs.split()]
    heartbeats = subprocess.run(["pgrep", "-f", "features.failover.heartbeat import"], capture_output=True, text=True).stdout
    found += [f"heartbeat process {pid}" for pid in heartbeats.split()]
    return found


def make_run(*args: str) -> str:
    proc = subprocess.run(["make", "run", *args], cwd=REPO, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    return out


def top_tier_packets(out: str) -> list[int]:
    """Packets per spine/core from the summary line 'Traffic through the top tier: s 8 pkts, ...'."""
    line = next(ln for ln in out.splitlines() if ln.startswith("Traffic through the top tier"))
    return [int(part.split()[1]) for part in line.split(":", 1)[1].split(",")]


def test_make_run_no_cli_on_leaf_spine():
    topo = load_topology(REPO / "topologies" / "leaf-spine.yaml")
    assert leftovers(topo) == [], "a previous run left things behind"
    out = make_run("ARGS=--no-cli")
    assert "All-pairs connectivity: 12/12 host pairs OK" in out, out
    # Both spines carried some of the leaf-to-leaf pings (ECMP over the 5-tuple).
    counts = top_tier_packets(out)
    assert len(counts) == 2 and all(c > 0 for c in counts), out
    assert leftovers(topo) == [], out


def test_make_run_rejects_a_broken_topology_before_starting(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nswitches: [s1]\nhosts: [h1]\nlinks:\n  - [h1, s9]\n")
    proc = subprocess.run(["make", "run", f"TOPO={bad}", "ARGS=--no-cli"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert f"{bad}: links[0].b: unknown node 's9'" in proc.stderr
    assert "starting" not in proc.stdout


def test_fat_tree_reaches_all_pairs_and_uses_every_core():
    """240 host pairs over 20 switches; with per-switch ECMP seeds no core is
    left idle (a single shared hash polarizes: half the cores carried nothing)."""
    out = make_run("TOPO=fat-tree-k4", "ARGS=--no-cli --log-level warn")
    assert "All-pairs connectivity: 240/240 host pairs OK" in out, out
    counts = top_tier_packets(out)
    assert len(counts) == 4 and all(c > 0 for c in counts), out


def test_the_small_slim_fly_reaches_all_pairs():
    """slimfly-q3 (18 routers, minimal routing) through `make run`: every
    host pair answers. (The small Dragonfly and torus answer every pair in
    tests/e2e/test_nonminimal_routing.py, under each of their routings; the
    mid-size ones, 36-50 routers, are checked by hand: topologies/README.md.)"""
    name = "slimfly-q3"
    topo = load_topology(name)
    pairs = len(topo.hosts) * (len(topo.hosts) - 1)
    out = make_run(f"TOPO={name}", "ARGS=--no-cli --log-level warn")
    assert f"All-pairs connectivity: {pairs}/{pairs} host pairs OK" in out, out
    assert leftovers(topo) == [], out
