"""The aggregation control-plane module (features/aggregation.py): the
topology section's validation names the field, slots are placed without
overlap, and the aggregating switch gets the job, worker, replica entries
and multicast groups (and the other switches none)."""
import ipaddress
from pathlib import Path

import pytest
import yaml

from features import aggregation as ag
from control.topology import TopologyError
from features import load_topology, topology_from_dict
from wire import aggregation as ah

REPO = Path(__file__).resolve().parents[3]
RACK = {
    "name": "rack", "defaults": {"link": {"bandwidth_mbps": 100}},
    "switches": [{"name": "tor"}],
    "hosts": ["h1", "h2", "h3", "ps"],
    "links": [["h1", "tor"], ["h2", "tor"], ["h3", "tor"], ["ps", "tor"]],
}


def rack(section):
    return topology_from_dict({**RACK, "aggregation": section}, "rack.yaml")


def test_jobs_are_placed_dedicated_from_zero_shared_at_the_top():
    t = rack({"shared_slots": 16, "jobs": [{"job": 1, "workers": ["h1", "h2"], "server": "ps", "slots": 8},
                                            {"job": 2, "workers": ["h2", "h3"], "server": "ps", "slots": 4},
                                            {"job": 3, "workers": ["h1", "h3"], "server": "ps", "shared": True}]})
    p = t.features["aggregation"].placements
    assert (p[1]["tor"].switch, p[1]["tor"].base, p[1]["tor"].slots) == ("tor", 0, 8)
    assert (p[2]["tor"].base, p[2]["tor"].slots) == (8, 4)
    assert (p[3]["tor"].base, p[3]["tor"].slots) == (ag.AGG_SLOTS - 16, 16)


@pytest.mark.parametrize("section, field, message", [
    ([], "aggregation", "expected a mapping"),
    ({"jobs": []}, "aggregation.jobs", "non-empty list"),
    ({"jobs": [], "pool": 3}, "aggregation.pool", "unknown field"),
    ({"shared_slots": 0, "jobs": [{"job": 1, "workers": ["h1"], "server": "ps", "slots": 1}]},
     "aggregation.shared_slots", "expected 1.."),
    ({"jobs": [{"job": 16, "workers": ["h1"], "server": "ps", "slots": 1}]}, "jobs[0].job", "1..15"),
    ({"jobs": [{"job": 1, "workers": ["h1"], "server": "nobody", "slots": 1}]}, "jobs[0].server", "host name"),
    ({"jobs": [{"job": 1, "workers": ["h1", "hx"], "server": "ps", "slots": 1}]}, "jobs[0].workers", "'hx'"),
    ({"jobs": [{"job": 1, "workers": ["h1", "ps"], "server": "ps", "slots": 1}]}, "jobs[0].workers",
     "cannot be both"),
    ({"jobs": [{"job": 1, "workers": ["h1", "h1"], "server": "ps", "slots": 1}]}, "jobs[0].workers", "twice"),
    ({"jobs": [{"job": 1, "workers": ["h1"], "server": "ps"}]}, "jobs[0].slots", "dedicated slots"),
    ({"jobs": [{"job": 1, "workers": ["h1"], "server": "ps", "slots": 4, "shared": True}]}, "jobs[0].slots",
     "not both"),
    ({"jobs": [{"job": 1, "workers": ["h1"], "server": "ps", "slots": 1},
               {"job": 1, "workers": ["h2"], "server": "ps", "slots": 1}]}, "jobs[1].job", "defined twice"),
    ({"jobs": [{"job": 1, "workers": ["h1"], "server": "ps", "slots": 400}]}, "aggregation.jobs",
     "dedicated ranges need 400"),
    ({"jobs": [{"job": 1, "workers": ["h1"], "server": "ps", "slots": 4, "block_elements": 100}]},
     "jobs[0].block_elements", "expected 64 or 256"),
    ({"jobs": [{"job": 1, "workers": ["h1"], "server": "ps", "slots": 4, "block_elements": True}]},
     "jobs[0].block_elements", "int32 elements a packet carries"),
], ids=["not-mapping", "no-jobs", "unknown-field", "shared-0", "job-16", "unknown-server", "unknown-worker",
        "server-is-worker", "worker-twice", "no-slots", "slots-and-shared", "job-twice", "too-many-slots",
        "block-100", "block-bool"])
def test_bad_sections_name_the_field(section, field, message):
    with pytest.raises(TopologyError) as err:
        rack(section)
    assert field in str(err.value) and message in str(err.value)


def test_the_servers_switch_gets_everything_and_only_it(p4info):
    t = load_topology("topologies/leaf-spine.yaml")
    job = t.features["aggregation"].job(1)
    for sw in t.switches:
        state = ag.switch_state(p4info, t, sw)
        # every switch manages the job's groups, so moving a job leaves nothing behind
        assert state.managed_multicast_groups == {job.group, *(job.worker_group(i) for i in range(3))}
        if sw != "leaf2":
            assert not state.table_entries and not state.multicast_groups
    state = ag.switch_state(p4info, t, "leaf2")
    names = {p4info.by_id(e.table_id).preamble.name for e in state.table_entries}
    assert names == {"FabricIngress.aggregation.agg_job", "FabricIngress.aggregation.agg_worker",
                     "FabricEgress.aggregation.agg_replica"}
    groups = {g.multicast_group_id: g for g in state.multicast_groups}
    assert len(groups[job.group].replicas) == 3
    # h3 is behind leaf2 itself; h1 and h2 behind a spine
    ports = sorted(r.egress_port for r in groups[job.group].replicas)
    assert ports.count(t.hosts["h3"].switch_port) == 1
    assert {r.instance for r in groups[job.group].replicas} == {job.worker_group(i) for i in range(3)}


@pytest.mark.parametrize("block, udp_length", [(None, 1044), (64, 276), (256, 1044)])
def test_a_jobs_block_size_is_its_udp_length_on_the_switch(p4info, block, udp_length):
    job = {"job": 2, "workers": ["h1", "h2"], "server": "ps", "slots": 4}
    if block is not None:
        job["block_elements"] = block
    t = rack({"jobs": [job]})
    assert t.features["aggregation"].job(2).block_elements == (block or ah.DEFAULT_BLOCK_ELEMENTS)
    (entry,) = [e for e in ag.switch_state(p4info, t, "tor").table_entries
                if p4info.by_id(e.action.action.action_id).preamble.name.endswith("set_job")]
    action = p4info.by_id(entry.action.action.action_id)
    params = {p.name: p.id for p in action.params}
    value = next(v for v in entry.action.action.params if v.param_id == params["udp_length"])
    assert int.from_bytes(value.value, "big") == udp_length


def test_worker_ids_bits_and_unicast_groups(p4info):
    t = rack({"jobs": [{"job": 5, "workers": ["h3", "h1"], "server": "ps", "slots": 2}]})
    state = ag.switch_state(p4info, t, "tor")
    workers = [e for e in state.table_entries
               if p4info.by_id(e.table_id).preamble.name.endswith("agg_worker")]
    params = [{p.param_id: int.from_bytes(p.value, "big") for p in e.action.action.params} for e in workers]
    assert [(p[1], p[2], p[3]) for p in params] == [(0, 1, 5 * 64 + 0x1000 + 1), (1, 2, 5 * 64 + 0x1000 + 2)]
    assert ag.Job(5, ("h3", "h1"), "ps", 2).port == ah.job_port(5)


def test_bench_state_is_one_job(p4info):
    state = ag.bench_state(p4info, 2)
    assert len(state.multicast_groups) == ag.BENCH_WORKERS + 1


# -- trees: a job summed over switches ------------------------------------------

def leaf_spine(jobs):
    raw = yaml.safe_load((REPO / "topologies" / "leaf-spine.yaml").read_text())
    raw["aggregation"] = {"jobs": jobs}
    return topology_from_dict(raw, "leaf-spine.yaml")


def fat_tree(jobs):
    raw = yaml.safe_load((REPO / "topologies" / "fat-tree-k4.yaml").read_text())
    raw["aggregation"] = {"jobs": jobs}
    return topology_from_dict(raw, "fat-tree-k4.yaml")


def entries(p4info, state, table):
    out = []
    for e in state.table_entries:
        if p4info.by_id(e.table_id).preamble.name.endswith("." + table):
            action = p4info.by_id(e.action.action.action_id)
            names = {p.id: p.name for p in action.params}
            params = {names[p.param_id]: int.from_bytes(p.value, "big") for p in e.action.action.params}
            out.append((action.preamble.name.split(".")[-1], params))
    return out


def test_workers_across_leaves_are_summed_at_the_spines_one_tree_each():
    t = leaf_spine([{"job": 1, "workers": ["h1", "h2", "h3"], "server": "h4", "slots": 32, "trees": 2}])
    cfg = t.features["aggregation"]
    trees = cfg.trees[1]
    assert [tr.root for tr in trees] == ["spine1", "spine2"]
    for tr in trees:
        assert tr.parent == {"leaf1": tr.root, "leaf2": tr.root}
        assert tr.children(tr.root) == ["leaf1", "leaf2"]
        # leaf1's port up in this tree leads to the root
        assert t.switches["leaf1"].ports[tr.up["leaf1"]].peer == tr.root
    # every switch of the trees holds the job's slots
    assert sorted(cfg.placements[1]) == ["leaf1", "leaf2", "spine1", "spine2"]


def test_jobs_roots_spread_over_the_spines_and_one_rack_is_summed_at_its_leaf():
    t = leaf_spine([{"job": 1, "workers": ["h1", "h3"], "server": "h4", "slots": 8, "trees": 1},
                    {"job": 2, "workers": ["h2", "h4"], "server": "h1", "slots": 8, "trees": 1},
                    {"job": 3, "workers": ["h1", "h2"], "server": "h4", "slots": 8, "trees": 1}])
    trees = t.features["aggregation"].trees
    assert (trees[1][0].root, trees[2][0].root, trees[3][0].root) == ("spine1", "spine2", "leaf1")
    assert trees[3][0].parent == {}                 # one level, at the rack's switch


def test_fat_tree_workers_in_four_pods_make_three_levels():
    t = fat_tree([{"job": 1, "workers": ["h1", "h5", "h9", "h13"], "server": "h2", "slots": 16, "trees": 4}])
    trees = t.features["aggregation"].trees[1]
    assert [tr.root for tr in trees] == ["c1", "c2", "c3", "c4"]
    first = trees[0]
    assert first.parent["e11"] == "a11" and first.parent["a11"] == "c1"
    assert sorted(first.children("c1")) == ["a11", "a21", "a31", "a41"]
    assert trees[2].parent["e11"] == "a12"          # c3 hangs off each pod's second aggregation switch
    # one pod, two edge switches: the pod's aggregation switches are nearest
    t = fat_tree([{"job": 1, "workers": ["h1", "h3"], "server": "h2", "slots": 16, "trees": 2}])
    assert [tr.root for tr in t.features["aggregation"].trees[1]] == ["a11", "a12"]


@pytest.mark.parametrize("job, field, message", [
    ({"trees": 3}, "jobs[0].trees", "1, 2, 4 or 8"),
    ({"trees": 4}, "jobs[0].trees", "only 2 switches"),
    ({"trees": 2, "roots": ["spine1"]}, "jobs[0].roots", "1 roots for 2 trees"),
    ({"roots": ["spine9"]}, "jobs[0].roots", "distinct switch names"),
    ({"trees": 1, "shared": True, "slots": None}, "jobs[0].shared", "dedicated slots"),
    ({"trees": 8, "slots": 4}, "jobs[0].trees", "8 trees for 4 slots"),
    ({"roots": ["leaf1", "spine1"]}, "jobs[0].trees", "children"),
], ids=["three", "too-many", "roots-count", "unknown-root", "shared", "slots", "disagree"])
def test_bad_trees_name_the_field(job, field, message):
    item = {"job": 1, "workers": ["h1", "h2", "h3"], "server": "h4", "slots": 32, **job}
    item = {k: v for k, v in item.items() if v is not None}
    with pytest.raises(TopologyError) as err:
        leaf_spine([item])
    assert field in str(err.value) and message in str(err.value)


def test_tree_entries_on_the_leaves_and_spines(p4info):
    t = leaf_spine([{"job": 1, "workers": ["h1", "h2", "h3"], "server": "h4", "slots": 32, "trees": 2}])
    job = t.features["aggregation"].job(1)
    leaf1 = ag.switch_state(p4info, t, "leaf1")
    [(action, params)] = entries(p4info, leaf1, "agg_job")
    assert action == "set_job" and params["workers"] == 2 and params["trees"] == 2
    workers = entries(p4info, leaf1, "agg_worker")
    assert [p["worker_bit"] for _, p in workers] == [1, 2]
    ups = entries(p4info, leaf1, "agg_up")
    assert [(a, p["port"]) for a, p in ups] == [
        ("send_up", ag.tree_ups(t, t.features["aggregation"].trees[1], "leaf1")[i].port) for i in range(2)]
    assert all(p["switch_addr"] == int(ipaddress.ip_address(t.switches["leaf1"].address)) for _, p in ups)
    assert len(entries(p4info, leaf1, "agg_from_parent")) == 2
    # a spine: two children, the leaves, known by their addresses; no way up
    spine = ag.switch_state(p4info, t, "spine1")
    [(_, params)] = entries(p4info, spine, "agg_job")
    assert params["workers"] == 2
    assert sorted(p["worker"] for _, p in entries(p4info, spine, "agg_replica")) == sorted(
        int(ipaddress.ip_address(t.switches[s].address)) for s in ("leaf1", "leaf2"))
    assert not entries(p4info, spine, "agg_up")
    groups = {g.multicast_group_id: g for g in spine.multicast_groups}
    assert len(groups[job.group].replicas) == 2
    # leaf2 has h3 (a worker) and h4 (the server): the job's entries and the server's wildcard
    assert sorted(a for a, _ in entries(p4info, ag.switch_state(p4info, t, "leaf2"), "agg_job")) == [
        "set_job", "unknown_job"]


def test_the_servers_switch_outside_the_tree_routes_the_jobs_packets(p4info):
    t = leaf_spine([{"job": 1, "workers": ["h1", "h2"], "server": "h4", "slots": 8, "trees": 1}])
    assert t.features["aggregation"].trees[1][0].root == "leaf1"
    assert sorted(a for a, _ in entries(p4info, ag.switch_state(p4info, t, "leaf2"), "agg_job")) == [
        "summed_elsewhere", "unknown_job"]
    assert not ag.switch_state(p4info, t, "spine1").table_entries
