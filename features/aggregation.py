"""Control-plane side of p4src/include/aggregation.p4: in-network aggregation
jobs, their workers, slots and result multicast.

In a topology file (validated with the rest of it, before anything starts):

    aggregation:
      shared_slots: 128        # the pool shared jobs take slots from (default 128)
      steal_after_ms: 500      # an unfinished slot use older than this may be taken over
      jobs:
        - {job: 1, workers: [h1, h2, h3, h4], server: h9, slots: 64}
        - {job: 2, workers: [h5, h6], server: h9, shared: true, block_elements: 64}

A job's packets go from its workers to its parameter server (`server`, a
host that is not one of its workers), on UDP port AGG_UDP_PORT_BASE + job;
the switch the server is plugged into aggregates them (every worker's
packets to the server pass it). `slots` gives the job a dedicated range of
that switch's AGG_SLOTS slots (its workers' window is at most that);
`shared: true` makes the job take slots from the shared pool by hash of
(job, seq), and fall back to the server when another job holds one (ATP).
`block_elements` is the job's packet: 64 or 256 int32 elements (default
256); the switch drops a contribution of the other size as
DROP_AGG_BLOCK_SIZE, and the job's workers must be started with the same
size.

A job may instead be summed over trees of switches (`trees: N`, optionally
`roots: [...]`): each switch of a tree sums its children (its own workers
and the switches below it) and sends the partial sum up to its parent; the
root multicasts the result down the tree. The controller picks the roots
(switches whose farthest worker switch is nearest, spread over jobs), builds
each tree from shortest paths, and a block's tree is its slot mod N
(docs/protocols/aggregation.md, "Trees").

controller.feature("aggregation").set_jobs(jobs) changes the jobs at runtime.

On the aggregating switch, per job: an agg_job entry (server address, job)
with the job's worker count, slots and multicast group; one agg_worker entry
per worker (its id is its position in `workers`); multicast group
JOB_GROUP_BASE + job * GROUPS_PER_JOB (all workers, the result) and one per
worker (+ 1 + id, a result sent again); agg_replica entries write each
worker's address into its replica (replication id = its unicast group's
id). Each server also gets a wildcard-job entry: packets to it for a job
that is not set up are dropped as DROP_AGG_UNKNOWN_JOB.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from collections.abc import Set as AbstractSet
from typing import Any, NoReturn, Optional, Sequence

from p4.v1 import p4runtime_pb2

from wire import aggregation as ah
from control.feature import Fail, FeatureSpec, Pieces, check_mapping, one_mode
from control.p4constants import constants
from control.p4info import EntryError, P4Info
from control.sync import SwitchState

SECTION = "aggregation"
JOB_TABLE = "agg_job"
WORKER_TABLE = "agg_worker"
REPLICA_TABLE = "agg_replica"
UP_TABLE = "agg_up"
FROM_PARENT_TABLE = "agg_from_parent"
TABLES = (JOB_TABLE, WORKER_TABLE, REPLICA_TABLE, UP_TABLE, FROM_PARENT_TABLE)
MAX_TREES = 8                         # a job's trees: a power of two (a block's tree is slot & (trees - 1))
EVENTS_COUNTER = "agg_events"
AGG_SLOTS = constants()["AGG_SLOTS"]
MAX_WORKERS = constants()["AGG_MAX_WORKERS"]
JOB_GROUP_BASE = 0x1000
GROUPS_PER_JOB = 64                   # the job's group, then one per worker (MAX_WORKERS fit)
DEFAULT_SHARED_SLOTS = 128
DEFAULT_STEAL_AFTER_MS = 500
EVENTS = {name[len("AGG_EVENT_"):].lower(): v for name, v in constants().items() if name.startswith("AGG_EVENT_")}
FIELDS = {"shared_slots", "steal_after_ms", "jobs"}
JOB_FIELDS = {"job", "workers", "server", "slots", "shared", "trees", "roots", "block_elements"}


class AggregationConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Job:
    job: int
    workers: tuple[str, ...]
    server: str
    slots: int = 0                    # dedicated slots (0 with shared)
    shared: bool = False
    trees: int = 0                    # 0: summed at the server's switch; N: over N trees of switches
    roots: tuple[str, ...] = ()       # the trees' roots, if the topology file names them
    block_elements: int = ah.DEFAULT_BLOCK_ELEMENTS   # int32 elements a packet carries

    @property
    def port(self) -> int:
        return ah.job_port(self.job)

    @property
    def group(self) -> int:
        return JOB_GROUP_BASE + self.job * GROUPS_PER_JOB

    def worker_group(self, worker: int) -> int:
        return self.group + 1 + worker


@dataclass(frozen=True)
class JobPlacement:
    """Where a job's slots are on one of its aggregating switches."""
    job: Job
    switch: str
    base: int
    slots: int


@dataclass(frozen=True)
class Tree:
    """One aggregation tree of a job: every switch but the root has a
    parent, reached through its port `up[switch]`."""
    root: str
    parent: dict[str, str]
    up: dict[str, int]

    @property
    def switches(self) -> list[str]:
        return [self.root, *sorted(self.parent)]

    def children(self, switch: str) -> list[str]:
        return sorted(s for s, p in self.parent.items() if p == switch)


@dataclass
class AggregationConfig:
    jobs: tuple[Job, ...] = ()
    shared_slots: int = DEFAULT_SHARED_SLOTS
    steal_after_ms: int = DEFAULT_STEAL_AFTER_MS
    placements: dict[int, dict[str, JobPlacement]] = field(default_factory=dict)   # job id -> switch -> slots
    trees: dict[int, tuple[Tree, ...]] = field(default_factory=dict)            # job id -> its trees (none: one level)

    def job(self, job: int) -> Job:
        for j in self.jobs:
            if j.job == job:
                return j
        raise KeyError(f"no aggregation job {job} (jobs: {', '.join(str(j.job) for j in self.jobs) or 'none'})")


def _int(value: Any, lo: int, hi: int) -> Optional[int]:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        return None
    return value


def parse_section(raw: Any, topo, fail: Fail) -> AggregationConfig:
    """Validate a topology's `aggregation:` section and place the jobs' slots."""
    check_mapping(raw, SECTION, FIELDS, fail, what="{jobs, shared_slots, steal_after_ms}")
    shared_slots = _int(raw.get("shared_slots", DEFAULT_SHARED_SLOTS), 1, AGG_SLOTS)
    if shared_slots is None:
        fail(f"{SECTION}.shared_slots", f"expected 1..{AGG_SLOTS}, got {raw.get('shared_slots')!r}")
    steal = _int(raw.get("steal_after_ms", DEFAULT_STEAL_AFTER_MS), 1, 3_600_000)
    if steal is None:
        fail(f"{SECTION}.steal_after_ms", f"expected milliseconds, 1..3600000, got {raw.get('steal_after_ms')!r}")
    jobs_raw = raw.get("jobs")
    if not isinstance(jobs_raw, list) or not jobs_raw:
        fail(f"{SECTION}.jobs", "expected a non-empty list of jobs")
    jobs: list[Job] = []
    for i, item in enumerate(jobs_raw):
        where = f"{SECTION}.jobs[{i}]"
        check_mapping(item, where, JOB_FIELDS, fail, what="{job, workers, server, slots | shared}")
        job_id = _int(item.get("job"), 1, ah.MAX_JOBS)
        if job_id is None:
            fail(f"{where}.job", f"expected a job id 1..{ah.MAX_JOBS}, got {item.get('job')!r}")
        if any(j.job == job_id for j in jobs):
            fail(f"{where}.job", f"job {job_id} is defined twice")
        server = item.get("server")
        if server not in topo.hosts:
            fail(f"{where}.server", f"expected a host name, got {server!r} (hosts: {', '.join(topo.hosts)})")
        workers = item.get("workers")
        if not isinstance(workers, list) or not workers:
            fail(f"{where}.workers", "expected a non-empty list of host names")
        if len(workers) > MAX_WORKERS:
            fail(f"{where}.workers", f"{len(workers)} workers, at most {MAX_WORKERS} (AGG_MAX_WORKERS)")
        for w in workers:
            if w not in topo.hosts:
                fail(f"{where}.workers", f"{w!r} is not a host (hosts: {', '.join(topo.hosts)})")
            if w == server:
                fail(f"{where}.workers", f"{w} is the job's server: a host cannot be both")
        if len(set(workers)) != len(workers):
            fail(f"{where}.workers", "a worker is listed twice")
        shared = item.get("shared", False)
        if not isinstance(shared, bool):
            fail(f"{where}.shared", f"expected true or false, got {shared!r}")
        if shared and "slots" in item:
            fail(f"{where}.slots", "a shared job takes slots from the shared pool: give slots or shared, not both")
        slots = 0
        if not shared:
            dedicated = _int(item.get("slots"), 1, AGG_SLOTS)
            if dedicated is None:
                fail(f"{where}.slots", f"expected dedicated slots 1..{AGG_SLOTS} (or shared: true), "
                                       f"got {item.get('slots')!r}")
            slots = dedicated
        roots = item.get("roots", [])
        if not isinstance(roots, list) or any(r not in topo.switches for r in roots) or len(set(roots)) != len(roots):
            fail(f"{where}.roots", f"expected distinct switch names, got {roots!r} "
                                   f"(switches: {', '.join(topo.switches)})")
        trees = item.get("trees", len(roots))
        if isinstance(trees, bool) or trees not in (0, 1, 2, 4, MAX_TREES):
            fail(f"{where}.trees", f"expected 1, 2, 4 or 8 trees (a block's tree is its slot mod trees), got {trees!r}")
        if trees > slots > 0:
            fail(f"{where}.trees", f"{trees} trees for {slots} slots: each tree needs a slot")
        if roots and len(roots) != trees:
            fail(f"{where}.roots", f"{len(roots)} roots for {trees} trees")
        if trees and shared:
            fail(f"{where}.shared", "a job summed over trees takes dedicated slots on every switch of its "
                                    "trees (a shared pool's collisions would strand the other levels)")
        block = item.get("block_elements", ah.DEFAULT_BLOCK_ELEMENTS)
        if isinstance(block, bool) or block not in ah.BLOCK_SIZES:
            fail(f"{where}.block_elements", f"expected {' or '.join(map(str, ah.BLOCK_SIZES))} (int32 elements a "
                                            f"packet carries), got {block!r}")
        jobs.append(Job(job_id, tuple(workers), server, slots, shared, trees, tuple(roots), block))
    cfg = AggregationConfig(tuple(jobs), shared_slots, steal)
    for i, job in enumerate(jobs):
        try:
            cfg.trees[job.job] = build_trees(topo, job, cfg.trees)
        except AggregationConfigError as exc:
            fail(f"{SECTION}.jobs[{i}].trees", str(exc))
    try:
        cfg.placements = place(topo, cfg)
    except AggregationConfigError as exc:
        fail(f"{SECTION}.jobs", str(exc))
    return cfg


def aggregating_switch(topo, job: Job) -> str:
    """The switch of the server's (first) NIC: every packet to that address passes it."""
    return topo.hosts[job.server].switch


def aggregating_switches(topo, cfg: AggregationConfig, job: Job) -> list[str]:
    """Where the job is summed: the server's switch, or every switch of its trees."""
    trees = cfg.trees.get(job.job, ())
    if not trees:
        return [aggregating_switch(topo, job)]
    return sorted({s for t in trees for s in t.switches})


def build_trees(topo, job: Job, others: dict[int, tuple[Tree, ...]]) -> tuple[Tree, ...]:
    """The job's trees: rooted at the switches it names, else at those whose
    farthest worker switch is nearest (spine-level for workers across
    leaves, the leaf for one rack), the least used by earlier jobs first;
    each tree joins every worker's switch to its root by a shortest path
    (BFS from the root, lowest port first). A switch in several trees must
    have the same children in each (its entries are per job)."""
    if not job.trees:
        return ()
    dist = topo.hops_between_switches()
    leaves = sorted({topo.hosts[w].switch for w in job.workers})
    if job.roots:
        roots = list(job.roots)
        for r in roots:
            if any(leaf not in dist[r] for leaf in leaves):
                raise AggregationConfigError(f"job {job.job}: root {r} does not reach every worker's switch")
    else:
        used: dict[str, int] = {}
        for trees in others.values():
            for t in trees:
                used[t.root] = used.get(t.root, 0) + 1
        reach = {s: max(dist[s].get(leaf, 1 << 30) for leaf in leaves) for s in topo.switches}
        nearest = min(reach.values())
        if nearest >= 1 << 30:
            raise AggregationConfigError(f"job {job.job}: no switch reaches every worker's switch")
        candidates = sorted((s for s in topo.switches if reach[s] == nearest), key=lambda s: (used.get(s, 0), s))
        if len(candidates) < job.trees:
            raise AggregationConfigError(
                f"job {job.job}: {job.trees} trees, but only {len(candidates)} switches are as near to every "
                f"worker's switch ({', '.join(candidates)}): name the roots, or fewer trees")
        roots = candidates[:job.trees]
    trees = tuple(_tree(topo, r, leaves) for r in roots)
    children: dict[str, tuple[str, list[str]]] = {}
    for t in trees:
        for s in t.switches:
            seen = children.setdefault(s, (t.root, t.children(s)))
            if seen[1] != t.children(s):
                raise AggregationConfigError(
                    f"job {job.job}: {s} has children {seen[1]} in the tree rooted at {seen[0]} but "
                    f"{t.children(s)} in the one rooted at {t.root}: name roots whose trees agree, or one tree")
    return trees


def _tree(topo, root: str, leaves: list[str]) -> Tree:
    parent_of: dict[str, tuple[str, int]] = {root: ("", 0)}
    queue = deque([root])
    while queue:
        cur = queue.popleft()
        for port in sorted(topo.switch_neighbours(cur), key=lambda p: p.number):
            if port.peer not in parent_of and port.peer_port is not None:
                parent_of[port.peer] = (cur, port.peer_port)
                queue.append(port.peer)
    parent: dict[str, str] = {}
    up: dict[str, int] = {}
    for leaf in leaves:
        s = leaf
        while s != root:
            parent[s], up[s] = parent_of[s]
            s = parent[s]
    return Tree(root, parent, up)


def place(topo, cfg: AggregationConfig) -> dict[int, dict[str, JobPlacement]]:
    """Dedicated ranges from slot 0 up, in job order, on each switch that
    sums the job; the shared pool is the last shared_slots slots."""
    placements: dict[int, dict[str, JobPlacement]] = {}
    next_free: dict[str, int] = {}
    pool_base = AGG_SLOTS - cfg.shared_slots
    for job in cfg.jobs:
        placements[job.job] = {}
        for sw in aggregating_switches(topo, cfg, job):
            if job.shared:
                placements[job.job][sw] = JobPlacement(job, sw, pool_base, cfg.shared_slots)
                continue
            base = next_free.get(sw, 0)
            if base + job.slots > pool_base:
                raise AggregationConfigError(
                    f"job {job.job}: {sw} has {AGG_SLOTS} slots, {cfg.shared_slots} of them shared; "
                    f"the dedicated ranges need {base + job.slots} (lower slots or shared_slots)")
            placements[job.job][sw] = JobPlacement(job, sw, base, job.slots)
            next_free[sw] = base + job.slots
    return placements


def empty_state(p4info: P4Info, groups: AbstractSet[int] = frozenset()) -> SwitchState:
    return SwitchState(managed_tables={p4info.table(t).preamble.id for t in TABLES},
                       managed_multicast_groups=set(groups))


@dataclass(frozen=True)
class WorkerPath:
    """Where a child's result replica leaves the aggregating switch: a
    worker, or (trees) a switch below, by its aggregation address."""
    ip: str
    port: int
    src_mac: str
    dst_mac: str


@dataclass(frozen=True)
class UpPath:
    """Where a switch below the root of tree `tree` sends its partial sums."""
    tree: int
    port: int
    src_mac: str
    dst_mac: str
    switch_addr: str


def job_state(p4info: P4Info, placement: JobPlacement, server_ip: str, workers: list[WorkerPath],
              steal_after_ms: int, *, trees: int = 0, up: Sequence[UpPath] = ()) -> SwitchState:
    """The entries, multicast groups and replicas of one job on one switch
    (`workers`: its children; `up`: its parents, a job summed over trees)."""
    job = placement.job
    state = SwitchState()
    state.table_entries.append(p4info.table_entry(
        JOB_TABLE, {"meta.agg.server": server_ip, "hdr.agg.job": (job.job, 0xFF)}, priority=2,
        action="set_job", params={"workers": len(workers), "base": placement.base, "slots": placement.slots,
                                  "shared": int(job.shared), "job_group": job.group,
                                  "steal_after_us": steal_after_ms * 1000, "trees": trees,
                                  "udp_length": ah.udp_length(job.block_elements)}))
    for u in up:
        state.table_entries.append(p4info.table_entry(
            UP_TABLE, {"hdr.agg.job": job.job, "meta.agg.tree": u.tree}, action="send_up",
            params={"port": u.port, "src_mac": u.src_mac, "dst_mac": u.dst_mac, "switch_addr": u.switch_addr}))
        state.table_entries.append(p4info.table_entry(
            FROM_PARENT_TABLE, {"hdr.agg.job": job.job, "meta.agg.tree": u.tree, "std_meta.ingress_port": u.port},
            action="result_down"))
    everyone = []
    for i, w in enumerate(workers):
        rid = job.worker_group(i)
        state.table_entries.append(p4info.table_entry(
            WORKER_TABLE, {"hdr.agg.job": job.job, "hdr.ipv4.src_addr": w.ip}, action="set_worker",
            params={"worker": i, "worker_bit": 1 << i, "worker_group": rid}))
        state.table_entries.append(p4info.table_entry(
            REPLICA_TABLE, {"std_meta.egress_rid": rid}, action="to_worker",
            params={"worker": w.ip, "src_mac": w.src_mac, "dst_mac": w.dst_mac}))
        replica = p4runtime_pb2.Replica(egress_port=w.port, instance=rid)
        everyone.append(replica)
        state.multicast_groups.append(p4runtime_pb2.MulticastGroupEntry(multicast_group_id=rid, replicas=[replica]))
    state.multicast_groups.append(p4runtime_pb2.MulticastGroupEntry(multicast_group_id=job.group, replicas=everyone))
    return state


def unknown_job_entry(p4info: P4Info, server_ip: str):
    return p4info.table_entry(JOB_TABLE, {"meta.agg.server": server_ip, "hdr.agg.job": (0, 0)}, priority=1,
                              action="unknown_job")


def summed_elsewhere_entry(p4info: P4Info, server_ip: str, job: int):
    return p4info.table_entry(JOB_TABLE, {"meta.agg.server": server_ip, "hdr.agg.job": (job, 0xFF)}, priority=2,
                              action="summed_elsewhere")


def tree_children(topo, job: Job, trees: Sequence[Tree], switch: str) -> list[WorkerPath]:
    """A tree switch's children: its own workers (job order), then the
    switches below it (by name), addressed by their aggregation addresses."""
    sw = topo.switches[switch]
    out = [worker_path(topo, switch, w) for w in job.workers if topo.hosts[w].primary.switch == switch]
    tree = next(t for t in trees if switch in t.switches)
    for child in tree.children(switch):
        child_port = topo.switches[child].ports[tree.up[child]]
        out.append(WorkerPath(topo.switches[child].address, child_port.peer_port, sw.ports[child_port.peer_port].mac,
                              child_port.mac))
    return out


def tree_ups(topo, trees: Sequence[Tree], switch: str) -> list[UpPath]:
    """A tree switch's way up in each tree where it is not the root."""
    sw = topo.switches[switch]
    out = []
    for i, t in enumerate(trees):
        if switch in t.parent:
            port = sw.ports[t.up[switch]]
            out.append(UpPath(i, port.number, port.mac, topo.switches[port.peer].ports[port.peer_port].mac,
                              sw.address))
    return out


def worker_path(topo, switch: str, worker: str) -> WorkerPath:
    """The first next hop of `switch`'s route to the worker's (first) NIC."""
    nic = topo.hosts[worker].primary
    route = next((r for r in topo.routes()[switch] if r.prefix == nic.subnet), None)
    if route is None:
        raise AggregationConfigError(f"{switch} has no route to worker {worker} ({nic.ip})")
    hop = route.next_hops[0]
    return WorkerPath(nic.ip, hop.port, hop.src_mac, hop.dst_mac)


def all_groups(cfg: Optional[AggregationConfig]) -> set[int]:
    """Every multicast group id a job could use (managed on every switch, so
    a job moved away leaves nothing behind)."""
    if cfg is None:
        return set()
    return {g for j in cfg.jobs for g in [j.group, *(j.worker_group(i) for i in range(len(j.workers)))]}


def switch_state(p4info: P4Info, topo, switch: str, *, forwarding: Optional[SwitchState] = None) -> SwitchState:
    """The aggregation entries the topology file gives `switch` (feature interface)."""
    cfg: Optional[AggregationConfig] = topo.features.get(SECTION)
    state = empty_state(p4info, all_groups(cfg))
    if cfg is None:
        return state
    servers = set()
    for job in cfg.jobs:
        server_ip = topo.hosts[job.server].ip
        servers_switch = aggregating_switch(topo, job) == switch
        if servers_switch:
            servers.add(server_ip)
        placement = cfg.placements[job.job].get(switch)
        trees = cfg.trees.get(job.job, ())
        if placement is None:
            if servers_switch:                              # a job summed over trees without this switch
                state.table_entries.append(summed_elsewhere_entry(p4info, server_ip, job.job))
            continue
        if trees:
            state.merge(job_state(p4info, placement, server_ip, tree_children(topo, job, trees, switch),
                                  cfg.steal_after_ms, trees=len(trees), up=tree_ups(topo, trees, switch)))
        else:
            paths = [worker_path(topo, switch, w) for w in job.workers]
            state.merge(job_state(p4info, placement, server_ip, paths, cfg.steal_after_ms))
    for server_ip in sorted(servers):
        state.table_entries.append(unknown_job_entry(p4info, server_ip))
    return state


BENCH_JOB = 1
BENCH_WORKERS = 4
BENCH_SERVER = "10.0.2.1"                 # the bench route's destination (benchmarks/cases.py)
BENCH_SEQS = 64 * 50                      # distinct blocks the bench cycles through
BENCH_WHAT = (f"aggregation packets of {BENCH_WORKERS} workers, {ah.DEFAULT_BLOCK_ELEMENTS} elements "
              f"(results multicast), not plain UDP")


def bench_state(p4info: P4Info, port: int, block_elements: int = ah.DEFAULT_BLOCK_ELEMENTS) -> SwitchState:
    """Aggregation for `make bench`: job BENCH_JOB of BENCH_WORKERS workers
    (10.0.1.1..4) whose server is the bench route's destination; results
    leave through `port`. A cell's older use is never kept (steal after 0),
    so the bench's frames, cycled, keep aggregating."""
    job = Job(BENCH_JOB, tuple(f"w{i}" for i in range(BENCH_WORKERS)), "server", slots=64,
              block_elements=block_elements)
    placement = JobPlacement(job, "bench", 0, 64)
    workers = [WorkerPath(f"10.0.1.{i + 1}", port, "0a:00:00:00:02:01", "0a:00:02:00:00:01")
               for i in range(BENCH_WORKERS)]
    state = empty_state(p4info, {job.group, *(job.worker_group(i) for i in range(BENCH_WORKERS))})
    state.merge(job_state(p4info, placement, BENCH_SERVER, workers, 0))
    state.table_entries.append(unknown_job_entry(p4info, BENCH_SERVER))
    return state


def bench_frames(switch_mac: str, host_mac: str, block_elements: int = ah.DEFAULT_BLOCK_ELEMENTS) -> list[bytes]:
    """BENCH_SEQS blocks of `block_elements`, each from the BENCH_WORKERS
    workers in turn (the last completes the block: its packet becomes
    BENCH_WORKERS results), over 64 slots and both shadow sets: every
    packet is aggregated."""
    import numpy as np
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    data = np.arange(block_elements, dtype=np.int64) - 32
    # Per worker, the headers once (UDP checksum 0: none, as IPv4 allows); then payloads.
    heads = [bytes(Ether(dst=switch_mac, src=host_mac) / IP(src=f"10.0.1.{w + 1}", dst=BENCH_SERVER)
                   / UDP(sport=ah.job_port(BENCH_JOB), dport=ah.job_port(BENCH_JOB), chksum=0)
                   / Raw(bytes(ah.udp_length(block_elements) - 8)))[:42] for w in range(BENCH_WORKERS)]
    out = []
    for seq in range(BENCH_SEQS):
        slot = (seq % 64) | (ah.SLOT_SET if (seq // 64) & 1 else 0)
        payload = ah.pack(0, BENCH_JOB, seq, data, slot=slot)
        out += [head + payload for head in heads]
    return out


def events(conn, p4info: P4Info) -> dict[str, int]:
    """What the aggregation control did, by event (agg_events), over one switch connection."""
    return _by_event(conn.counter(p4info.counter_entry(EVENTS_COUNTER)))


def switch_events(controller, switch: str) -> dict[str, int]:
    """The same, of `switch` through the fabric's controller."""
    return _by_event(controller.counter(switch, EVENTS_COUNTER))


def _by_event(cells: dict[int, tuple[int, int]]) -> dict[str, int]:
    return {name: cells.get(index, (0, 0))[0] for name, index in EVENTS.items()}


class AggregationRuntime:
    """controller.feature("aggregation"): jobs changed at runtime."""

    def __init__(self, controller):
        self.ctl = controller

    def set_jobs(self, jobs: list[Job], *, shared_slots: Optional[int] = None,
                 steal_after_ms: Optional[int] = None):
        """Replace the jobs (add, change, remove a job): validated as the
        topology file's section is, slots placed again, and every switch
        reconciled (only the servers' switches hold entries). Nothing is
        written when the jobs are invalid."""
        topo = self.ctl.topo
        old = topo.features.get(SECTION) or AggregationConfig()
        raw = {"shared_slots": old.shared_slots if shared_slots is None else shared_slots,
               "steal_after_ms": old.steal_after_ms if steal_after_ms is None else steal_after_ms,
               "jobs": [{"job": j.job, "workers": list(j.workers), "server": j.server,
                         **({"shared": True} if j.shared else {"slots": j.slots}),
                         **({"trees": j.trees} if j.trees else {}), **({"roots": list(j.roots)} if j.roots else {}),
                         "block_elements": j.block_elements}
                        for j in jobs]}

        def fail(where: str, what: str) -> NoReturn:
            raise EntryError(f"{where}: {what}")

        topo.features[SECTION] = parse_section(raw, topo, fail)
        return self.ctl.program_all()


FEATURE = FeatureSpec(
    name="aggregation", section=SECTION,
    summary="in-network gradient aggregation: SwitchML slots with shadow sets, ATP-style pool shared by jobs, "
            "trees of switches",
    pieces=Pieces.of("aggregation", p4=("aggregation.p4", "aggregation_lanes.p4")),
    parse_section=parse_section, switch_state=switch_state, bench_states=one_mode(bench_state),
    bench_what=BENCH_WHAT, bench_frames=bench_frames,
    runtime=AggregationRuntime)
