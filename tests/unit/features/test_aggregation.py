"""The aggregation control-plane module (features/aggregation.py): the
topology section's validation names the field, slots are placed without
overlap, and the aggregating switch gets the job, worker, replica entries
and multicast groups (and the other switches none)."""
import pytest

from features import aggregation as ag
from core.topology import TopologyError
from features import load_topology, topology_from_dict
from wire import aggregation as ah
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
    assert (p[1].switch, p[1].base, p[1].slots) == ("tor", 0, 8)
    assert (p[2].base, p[2].slots) == (8, 4)
    assert (p[3].base, p[3].slots) == (ag.AGG_SLOTS - 16, 16)


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
], ids=["not-mapping", "no-jobs", "unknown-field", "shared-0", "job-16", "unknown-server", "unknown-worker",
        "server-is-worker", "worker-twice", "no-slots", "slots-and-shared", "job-twice", "too-many-slots"])
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
