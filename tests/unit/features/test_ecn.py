"""ECN profiles changed at runtime (features/ecn.py EcnRuntime), without a
switch: what the controller is asked to program."""
import pytest

from control.p4info import EntryError
from features import load_topology
from features.ecn import SECTION, EcnProfile, EcnRuntime


class RecordingController:
    """The controller's part EcnRuntime uses: the topology and program_switch."""

    def __init__(self, topo):
        self.topo = topo
        self.programmed: list[str] = []

    def program_switch(self, name: str) -> str:
        self.programmed.append(name)
        return f"report {name}"


def runtime() -> tuple[EcnRuntime, RecordingController]:
    ctl = RecordingController(load_topology("topologies/leaf-spine.yaml"))
    return EcnRuntime(ctl), ctl


def test_many_profiles_program_each_switch_once():
    ecn, ctl = runtime()
    step = EcnProfile.step(10)
    reports = ecn.set_profiles({(sw.name, port, q): step if q == 0 else None
                                for sw in ctl.topo.switches.values() for port in sw.ports for q in (0, None)})
    assert sorted(ctl.programmed) == sorted(ctl.topo.switches) and reports["leaf1"] == "report leaf1"
    profiles = ctl.topo.features[SECTION]
    assert profiles[("leaf1", 3, 0)] == step and ("leaf1", 3, None) not in profiles


def test_a_bad_entry_applies_nothing():
    ecn, ctl = runtime()
    with pytest.raises(EntryError, match="leaf1 has no port 9"):
        ecn.set_profiles({("leaf2", 1, None): EcnProfile.step(10), ("leaf1", 9, None): EcnProfile.step(10)})
    assert ctl.programmed == [] and not ctl.topo.features.get(SECTION)
    with pytest.raises(EntryError, match="no switch 'leaf9'"):
        ecn.set_profile("leaf9", 1, None)


def test_one_profile_is_one_switch_programmed():
    ecn, ctl = runtime()
    assert ecn.set_profile("spine1", 1, EcnProfile.step(5)) == "report spine1" and ctl.programmed == ["spine1"]
