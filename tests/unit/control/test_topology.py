"""Topology files: every shipped file loads, and every kind of mistake is
reported with the file, the field and what is wrong."""
from pathlib import Path

import pytest
import yaml

from control.topology import TopologyError

from features import load_topology, topology_from_dict

TOPOLOGIES = Path(__file__).resolve().parents[3] / "topologies"


@pytest.mark.parametrize("name,switches,hosts", [
    ("star", 1, 4), ("dumbbell", 2, 4), ("leaf-spine", 4, 4), ("fat-tree-k4", 20, 16)])
def test_shipped_topologies_load(name, switches, hosts):
    topo = load_topology(TOPOLOGIES / f"{name}.yaml")
    assert (len(topo.switches), len(topo.hosts)) == (switches, hosts)


def base():
    return {"name": "t", "switches": ["s1", "s2"], "hosts": ["h1", "h2"],
            "links": [["h1", "s1"], ["s1", "s2"], ["h2", "s2"]]}


def with_change(path, value):
    data = base()
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


@pytest.mark.parametrize("data,field,message", [
    pytest.param(with_change(["links", 1], {"a": "s1", "b": "s3"}), "links[1].b", "unknown node 's3'", id="unknown-node"),
    pytest.param(with_change(["links", 1], {"a": "s1", "b": "s2", "bandwidth_mbps": 0}),
                 "links[1].bandwidth_mbps", "must be > 0", id="zero-bandwidth"),
    pytest.param(with_change(["links", 1], {"a": "s1", "b": "s2", "loss_pct": 120}),
                 "links[1].loss_pct", "within 0..100", id="loss-over-100"),
    pytest.param(with_change(["links", 1], {"a": "s1", "b": "s2", "delay_ms": "5ms"}),
                 "links[1].delay_ms", "expected a number", id="delay-as-string"),
    pytest.param(with_change(["links", 1], {"a": "s1", "b": "s2", "latency": 1}),
                 "links[1].latency", "unknown field", id="unknown-link-field"),
    pytest.param(with_change(["links", 1], ["s1", "s1"]), "links[1]", "to itself", id="self-link"),
    pytest.param(with_change(["links", 1], ["s1"]), "links[1]", "[node, node]", id="short-link"),
    pytest.param(with_change(["links", 1], ["h1", "h2"]), "links[1]", "two hosts", id="host-to-host"),
    pytest.param(with_change(["links"], [["h1", "s1"], ["h1", "s2"], ["h2", "s2"], ["s1", "s2"]]),
                 "links[1]", "already has a link", id="host-two-links"),
    pytest.param(with_change(["links"], [["h1", "s1"], ["s1", "s2"]]), "links", "host 'h2' has no link", id="host-unlinked"),
    pytest.param(with_change(["links"], [["h1", "s1"], ["h2", "s2"]]), "links", "not connected", id="disconnected"),
    pytest.param(with_change(["hosts"], ["h1", "s1"]), "hosts[1].name", "duplicate node name", id="duplicate-name"),
    pytest.param(with_change(["hosts"], ["h1", "H2"]), "hosts[1].name", "not a valid node name", id="bad-name"),
    pytest.param(with_change(["hosts"], ["h1", "averyveryverylongname"]), "hosts[1].name", "not a valid node name",
                 id="name-too-long-for-ifname"),
    pytest.param(with_change(["switches"], []), "switches", "at least 1", id="no-switches"),
    pytest.param(with_change(["switches"], "s1"), "switches", "expected a list", id="switches-not-list"),
    pytest.param(with_change(["hostz"], []), "hostz", "unknown field", id="unknown-top-field"),
    pytest.param(with_change(["defaults"], {"link": {"bandwidth_mbps": -1}}), "defaults.link.bandwidth_mbps",
                 "must be > 0", id="bad-default"),
    pytest.param(with_change(["name"], ""), "name", "non-empty string", id="empty-name"),
])
def test_invalid_topology_names_field_and_problem(data, field, message):
    with pytest.raises(TopologyError) as err:
        topology_from_dict(data, source="bad.yaml")
    text = str(err.value)
    assert text.startswith(f"bad.yaml: {field}:"), text
    assert message in text


def test_unreadable_and_malformed_files_name_the_file(tmp_path):
    with pytest.raises(TopologyError, match="missing.yaml: cannot read"):
        load_topology(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nlinks: [h1, s1\n")
    with pytest.raises(TopologyError, match="broken.yaml: not valid YAML"):
        load_topology(broken)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just a string\n")
    with pytest.raises(TopologyError, match="scalar.yaml: expected a mapping"):
        load_topology(scalar)


def test_defaults_apply_and_links_override(tmp_path):
    data = base()
    data["defaults"] = {"link": {"bandwidth_mbps": 40, "delay_ms": 2}}
    data["links"][1] = {"a": "s1", "b": "s2", "bandwidth_mbps": 10}
    f = tmp_path / "t.yaml"
    f.write_text(yaml.safe_dump(data))
    topo = load_topology(f)
    assert [(link.bandwidth_mbps, link.delay_ms) for link in topo.links] == [(40, 2), (10, 2), (40, 2)]


def ecn_topology(*profiles):
    data = base()
    data["ecn"] = list(profiles)
    return data


def test_ecn_profiles_resolve_ports():
    topo = topology_from_dict(ecn_topology({"switch": "s1", "towards": "s2", "mode": "step", "k": 10},
                                  {"switch": "s2", "port": "all", "mode": "wred", "kmin": 5, "kmax": 30, "pmax": 0.1}))
    profiles = topo.features["ecn"]
    assert str(profiles[("s1", 2, None)]) == "step K=10"
    assert str(profiles[("s2", 1, None)]) == str(profiles[("s2", 2, None)]) == "WRED Kmin=5 Kmax=30 Pmax=0.1"
    assert ("s1", 1, None) not in profiles


def test_ecn_profile_of_one_queue():
    topo = topology_from_dict(ecn_topology({"switch": "s1", "port": 2, "mode": "step", "k": 10},
                                           {"switch": "s1", "port": 2, "queue": 3, "mode": "step", "k": 4}))
    profiles = topo.features["ecn"]
    assert str(profiles[("s1", 2, None)]) == "step K=10"
    assert str(profiles[("s1", 2, 3)]) == "step K=4"


@pytest.mark.parametrize("profile,field,message", [
    pytest.param({"switch": "s1", "port": 1, "mode": "wred", "kmin": 40, "kmax": 30, "pmax": 0.1},
                 "ecn[0].kmin", "kmin (40) must be below kmax (30)", id="kmin-above-kmax"),
    pytest.param({"switch": "s1", "port": 1, "mode": "wred", "kmin": 5, "kmax": 30, "pmax": 1.5},
                 "ecn[0].pmax", "probability within 0..1", id="pmax-above-1"),
    pytest.param({"switch": "s1", "port": 1, "mode": "wred", "kmin": 5, "kmax": 30, "pmax": -0.1},
                 "ecn[0].pmax", "probability within 0..1", id="pmax-negative"),
    pytest.param({"switch": "s1", "port": 7, "mode": "step", "k": 5}, "ecn[0].port", "s1 has no port 7", id="unknown-port"),
    pytest.param({"switch": "s1", "towards": "h2", "mode": "step", "k": 5}, "ecn[0].towards", "no link to 'h2'",
                 id="not-a-neighbour"),
    pytest.param({"switch": "s9", "port": 1, "mode": "step", "k": 5}, "ecn[0].switch", "unknown switch", id="unknown-switch"),
    pytest.param({"switch": "s1", "port": 1, "mode": "red", "k": 5}, "ecn[0].mode", "'step' or 'wred'",
                 id="unknown-mode"),
    pytest.param({"switch": "s1", "port": 1, "mode": "monitor"}, "ecn[0].mode",
                 "every queue's depth is recorded without a profile", id="monitor-is-gone"),
    pytest.param({"switch": "s1", "port": 1, "mode": "step"}, "ecn[0]", "needs k", id="step-without-k"),
    pytest.param({"switch": "s1", "port": 1, "mode": "step", "k": 5, "pmax": 0.1}, "ecn[0].pmax",
                 "not a parameter of mode step", id="step-with-pmax"),
    pytest.param({"switch": "s1", "port": 1, "mode": "step", "k": -1}, "ecn[0].k", "queue depth", id="negative-k"),
    pytest.param({"switch": "s1", "mode": "step", "k": 5}, "ecn[0]", "exactly one of port", id="no-port"),
    pytest.param({"switch": "s1", "port": 1, "queue": 8, "mode": "step", "k": 5}, "ecn[0].queue",
                 "priority queue 0..7", id="queue-out-of-range"),
])
def test_invalid_ecn_profiles_are_named(profile, field, message):
    with pytest.raises(TopologyError) as err:
        topology_from_dict(ecn_topology(profile), source="bad.yaml")
    assert str(err.value).startswith(f"bad.yaml: {field}:"), str(err.value)
    assert message in str(err.value)


def test_duplicate_ecn_port_is_rejected():
    with pytest.raises(TopologyError, match=r"ecn\[1\]: s1 port 2 already has an ECN profile"):
        topology_from_dict(ecn_topology({"switch": "s1", "port": 2, "mode": "step", "k": 5},
                               {"switch": "s1", "towards": "s2", "mode": "step", "k": 9}), source="bad.yaml")
