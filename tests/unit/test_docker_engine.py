"""docker/engine.sh privileged: the `run` options of a privileged container
on this host (Docker's --privileged fails where the host's capability
bounding set lacks one it asks for)."""
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Bits of the capabilities engine.sh names (linux/capability.h).
NET_ADMIN, SYS_ADMIN, SYS_RESOURCE, AUDIT_READ = 12, 21, 24, 37


def privileged(engine: str) -> list[str]:
    out = subprocess.run(["bash", str(REPO / "docker" / "engine.sh"), "privileged", engine],
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def bounding_set() -> tuple[int, int]:
    status = Path("/proc/self/status").read_text()
    bnd = int(next(line.split()[1] for line in status.splitlines() if line.startswith("CapBnd:")), 16)
    return bnd, int(Path("/proc/sys/kernel/cap_last_cap").read_text())


def test_podman_is_always_privileged():
    assert privileged("podman") == ["--privileged"]


def test_docker_gets_what_the_bounding_set_has():
    bnd, last = bounding_set()
    flags = privileged("docker")
    full = (1 << (last + 1)) - 1
    if bnd & full == full:
        assert flags == ["--privileged"]
        return
    # A host lacking a capability (one that is itself a container, e.g. without
    # CAP_SYS_RESOURCE): one --cap-add per capability it has, none it lacks.
    caps = [flags[i + 1] for i, f in enumerate(flags) if f == "--cap-add"]
    assert len(caps) == bin(bnd & ((1 << (AUDIT_READ + 1)) - 1)).count("1")
    assert len(set(caps)) == len(caps)
    for bit, name in ((NET_ADMIN, "NET_ADMIN"), (SYS_ADMIN, "SYS_ADMIN"), (SYS_RESOURCE, "SYS_RESOURCE")):
        assert (name in caps) == bool(bnd >> bit & 1), name
    assert "--privileged" not in flags
    for opt in ("seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"):
        assert opt in flags
