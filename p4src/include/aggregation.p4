// In-network aggregation: SwitchML's slots with shadow sets, ATP's sharing
// of a slot pool between jobs with the parameter server as fallback. The
// wire contract and the protocol are docs/protocols/aggregation.md.
//
// A job's workers send blocks of int32 (one chunk of AGG_CHUNK_ELEMENTS, or
// AGG_CHUNKS of them: the size the job declares) to the job's parameter
// server (PS); the switch that serves the PS (agg_job) sums them in registers
// instead of forwarding them, AGG_WORD_BITS / 32 elements to a register word
// (aggregation_lanes.p4). A slot cell (slot, shadow set) holds one use:
// (job, seq) of the block, the workers that contributed (bitmap), their
// count, the largest block exponent, and the element sums. The last
// contribution completes the cell and its packet, now carrying the sums,
// is multicast to the job's workers; egress writes each worker's addresses.
//
//  contribution to...                 the switch
//  the cell's use, new worker         adds; the last one multicasts the result
//  the cell's use, worker in bitmap   unfinished: drops it; completed: unicasts the result
//  an older use than the cell's       drops it: a late duplicate (dedicated slots,
//                                     while the cell's use is younger than steal_after)
//  a free or completed cell, an older starts a use: the sums are the elements
//  use of its own job (dedicated), or
//  a use older than steal_after
//  a cell another use holds           forwards it to the PS, flagged COLLISION
//
// A worker sends to a slot again only once it has that slot's previous
// result, alternating the shadow set; a new use overwrites the cell, so no
// reset round is needed, and the other set still answers retransmissions for
// the previous use. A completed sum that overflowed int32 is multicast
// flagged OVERFLOW: the workers send that block to the PS, which sums in
// int64. PS results (SERVER|RESULT) release the cell of their block.
//
// Trees (docs/protocols/aggregation.md, "Trees"): a job may be summed over a
// tree of switches instead of at the PS's switch. Every switch of the tree
// has the job's entries; its children are its own workers and the switches
// below it (agg_worker knows a child switch by its aggregation address). A
// switch below the root (agg_up hits for the block's tree) sends a completed
// sum up to its parent as a contribution of its own (a partial), and a
// retransmission to a completed cell sends the partial up again; the root
// multicasts the result to its children, and a switch that receives a result
// from its parent (agg_from_parent) multicasts it to its children. A block's
// tree is its slot mod the job's trees: a job's blocks spread over them.
// ECN: a contribution that arrives marked CE, or flagged CONGESTED, marks
// its cell, and the partial or result of that cell is flagged CONGESTED.
#ifndef AGGREGATION_P4
#define AGGREGATION_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

// A cell's state, one register word: seq, bitmap, time of its first
// contribution (us), job, count, exponent, status.
#define AGG_CELL_SEQ(s)      s[143:112]
#define AGG_CELL_BITMAP(s)   s[111:80]
#define AGG_CELL_STARTED(s)  s[79:32]
#define AGG_CELL_JOB(s)      s[31:24]
#define AGG_CELL_COUNT(s)    s[23:16]
#define AGG_CELL_EXPONENT(s) s[15:8]
#define AGG_CELL_STATUS(s)   s[7:0]
const bit<8> AGG_CELL_DONE = 1;
const bit<8> AGG_CELL_OVERFLOW = 2;        // AGG_FLAG_OVERFLOW >> 2
const bit<8> AGG_CELL_CONGESTED = 4;       // AGG_FLAG_CONGESTED >> 5
// meta.agg.answer: the packet now carries a completed cell's sum, for...
const bit<8> AGG_ANSWER_ALL = 1;           // every child (the cell just completed)
const bit<8> AGG_ANSWER_AGAIN = 2;         // the child that sent it again

control Aggregation(inout headers_t hdr,
                    inout local_metadata_t meta,
                    inout standard_metadata_t std_meta) {
    register<bit<144>, bit<32>>(AGG_CELLS) agg_cell;
    AGG_SUM_REGISTERS
    counter<bit<32>>(AGG_EVENTS, CounterType.packets) agg_events;

    // The packet's cell and that cell's state: meta.agg.cell, meta.agg.state.

    // The jobs whose parameter server this switch serves, by (server
    // address, job): ternary, so a wildcard-job entry per server catches
    // jobs that are not set up.
    action set_job(bit<8> workers, bit<16> base, bit<16> slots, bit<1> shared,
                   bit<16> job_group, bit<48> steal_after_us, bit<8> trees, bit<16> udp_length) {
        meta.agg.workers = workers;
        meta.agg.udp_length = udp_length;
        meta.agg.trees = trees;
        meta.agg.base = (bit<32>) base;
        meta.agg.slots = (bit<32>) slots;
        meta.agg.shared = (bit<8>) shared;
        meta.agg.job_group = job_group;
        meta.agg.steal_after = steal_after_us;
    }
    action unknown_job() {
        meta.drop_reason = DROP_AGG_UNKNOWN_JOB;
    }
    // The PS's switch when the job is summed over a tree that does not
    // include it: its packets are routed (fallback contributions, the PS's
    // results), not caught by the server's wildcard-job entry.
    action summed_elsewhere() {
    }
    table agg_job {
        key = {
            meta.agg.server: exact;
            hdr.agg.job:     ternary;
        }
        actions = { set_job; unknown_job; summed_elsewhere; @defaultonly NoAction; }
        const default_action = NoAction;
        size = 256;
    }

    // Who the sender is: the worker id is learned here, never read from the packet.
    action set_worker(bit<8> worker, bit<32> worker_bit, bit<16> worker_group) {
        hdr.agg.worker = worker;
        hdr.udp.checksum = 0;     // the switch rewrites the payload from here on
        meta.agg.worker_bit = worker_bit;
        meta.agg.worker_group = worker_group;
    }
    action not_a_worker() {
        meta.drop_reason = DROP_AGG_NOT_WORKER;
    }
    table agg_worker {
        key = {
            hdr.agg.job:       exact;
            hdr.ipv4.src_addr: exact;
        }
        actions = { set_worker; @defaultonly not_a_worker; }
        const default_action = not_a_worker();
        size = 4096;
    }

    // The cell of the packet's block: its job's dedicated slot (the packet
    // says which), or a slot of a shared range by hash of (job, seq).
    action dedicated_cell() {
        meta.agg.cell_valid = 1;
        meta.agg.cell = (meta.agg.base + (bit<32>) (hdr.agg.slot & ~AGG_SLOT_SET)) * 2
               + (bit<32>) (hdr.agg.slot >> 15);
    }
    action shared_cell() {
        meta.agg.cell_valid = 1;
        // One list element (p4c copies each into a metadata temporary): the same bytes as {job, seq}.
        hash(meta.agg.cell, HashAlgorithm.crc32, meta.agg.base, { hdr.agg.job ++ hdr.agg.seq }, meta.agg.slots);
        meta.agg.cell = meta.agg.cell * 2 + (bit<32>) (hdr.agg.slot >> 15);
    }

    // The lanes of the packet's chunks: start_, add_, read_ head (the first) and rest.
    AGG_LANE_ACTIONS

    // A contribution's own marks go into the cell's status: a child switch's
    // partial that overflowed or was congested, the congestion it met (CE).
    // Its elements go into the cell's sums after (AGG_LANES_START, AGG_LANES_ADD).
    action start_use() {
        meta.agg.state = hdr.agg.seq ++ meta.agg.worker_bit ++ std_meta.ingress_global_timestamp
                ++ hdr.agg.job ++ 8w1 ++ hdr.agg.exponent
                ++ ((hdr.agg.flags >> 2) & AGG_CELL_OVERFLOW | (hdr.agg.flags >> 5) & AGG_CELL_CONGESTED);
    }
    action add_contribution() {
        AGG_CELL_BITMAP(meta.agg.state) = AGG_CELL_BITMAP(meta.agg.state) | meta.agg.worker_bit;
        AGG_CELL_COUNT(meta.agg.state) = AGG_CELL_COUNT(meta.agg.state) + 1;
        AGG_CELL_STATUS(meta.agg.state) = AGG_CELL_STATUS(meta.agg.state)
            | (hdr.agg.flags >> 2) & AGG_CELL_OVERFLOW | (hdr.agg.flags >> 5) & AGG_CELL_CONGESTED;
    }
    action note_overflow() {
        AGG_CELL_STATUS(meta.agg.state) = AGG_CELL_STATUS(meta.agg.state) | AGG_CELL_OVERFLOW;
    }

    // The packet becomes a result from the parameter server to the workers
    // of `group`: egress (agg_replica) writes each worker's addresses.
    action send_result(bit<16> group) {
        std_meta.mcast_grp = group;
        meta.egress_work = meta.egress_work | EGRESS_AGG_RESULT;
        hdr.agg.flags = AGG_FLAG_RESULT
            | (AGG_CELL_STATUS(meta.agg.state) & AGG_CELL_OVERFLOW) << 2      // -> AGG_FLAG_OVERFLOW
            | (AGG_CELL_STATUS(meta.agg.state) & AGG_CELL_CONGESTED) << 5;    // -> AGG_FLAG_CONGESTED
        hdr.agg.exponent = AGG_CELL_EXPONENT(meta.agg.state);
        hdr.ipv4.src_addr = meta.agg.server;
        hdr.udp.checksum = 0;
    }

    // Below the root of the block's tree: the cell's sum (in the packet) goes
    // up to the parent as this switch's contribution, from its aggregation
    // address, out of the port the controller chose (never by ECMP).
    action send_up(bit<9> port, mac_addr_t src_mac, mac_addr_t dst_mac, ipv4_addr_t switch_addr) {
        std_meta.egress_spec = port;
        hdr.ethernet.src_addr = src_mac;
        hdr.ethernet.dst_addr = dst_mac;
        hdr.ipv4.src_addr = switch_addr;
        hdr.agg.flags = (AGG_CELL_STATUS(meta.agg.state) & AGG_CELL_OVERFLOW) << 2
            | (AGG_CELL_STATUS(meta.agg.state) & AGG_CELL_CONGESTED) << 5;
        hdr.agg.exponent = AGG_CELL_EXPONENT(meta.agg.state);
        hdr.udp.checksum = 0;
    }
    table agg_up {
        key = {
            hdr.agg.job:   exact;
            meta.agg.tree: exact;
        }
        actions = { send_up; @defaultonly NoAction; }
        const default_action = NoAction;     // the root of the block's tree
        size = 1024;
    }

    // A result from the parent in the block's tree, on the port that leads
    // to it: multicast to this switch's children (agg_replica addresses the
    // replicas to its workers and to the switches below).
    action result_down() {
        meta.drop_reason = DROP_NONE;        // addressed to this switch: forwarding found no route
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
        std_meta.mcast_grp = meta.agg.job_group;
        meta.egress_work = meta.egress_work | EGRESS_AGG_RESULT;
        hdr.udp.checksum = 0;
    }
    action not_from_parent() {
        meta.drop_reason = DROP_AGG_NOT_PARENT;
    }
    table agg_from_parent {
        key = {
            hdr.agg.job:           exact;
            meta.agg.tree:         exact;
            std_meta.ingress_port: exact;
        }
        actions = { result_down; @defaultonly not_from_parent; }
        const default_action = not_from_parent();
        size = 1024;
    }
    action absorb() {
        mark_to_drop(std_meta);
    }

    // The packet's contribution to its cell's state (meta.agg.state): a new
    // worker for the cell's use adds, a free or takeable cell starts a use;
    // a retransmission, a stale duplicate or a collision does neither.
    action note_added() {
        meta.agg.added = 1;
    }

    // (No `return` in this control: p4c turns each into a metadata flag and
    // BMv2 zeroes every metadata field of every packet.)
    apply {
        // Contributions go to the server; the server's own packets and
        // results (from the server or a parent switch) come from it.
        meta.agg.setValid();
        meta.agg.server = hdr.ipv4.dst_addr;
        if (hdr.agg.flags & (AGG_FLAG_SERVER | AGG_FLAG_RESULT) != 0) {
            meta.agg.server = hdr.ipv4.src_addr;
        }
        if (hdr.ipv4.ecn == ECN_CE) {       // ECN on aggregation: the mark travels in the header
            hdr.agg.flags = hdr.agg.flags | AGG_FLAG_CONGESTED;
            hdr.udp.checksum = 0;
        }
        // A packet of no job summed here is routed as any packet; a dropped one is left alone.
        switch (agg_job.apply().action_run) {
            set_job: {
                meta.agg.tree = hdr.agg.slot & ~AGG_SLOT_SET & ((bit<16>) meta.agg.trees - 1);   // trees: a power of two
                if (hdr.agg.flags & (AGG_FLAG_SERVER | AGG_FLAG_RESULT) == AGG_FLAG_RESULT) {
                    // A result on its way down the job's tree (a forged one is dropped).
                    if (agg_from_parent.apply().hit) {
                        agg_events.count(AGG_EVENT_RESULT_DOWN);
                    }
                } else if (meta.drop_reason == DROP_NONE) {
                    if (meta.agg.shared == 1) {
                        shared_cell();
                    } else if ((bit<32>) (hdr.agg.slot & ~AGG_SLOT_SET) < meta.agg.slots) {
                        dedicated_cell();
                    } else {
                        meta.drop_reason = DROP_AGG_SLOT_RANGE;
                    }
                }
            }
        }
        if (meta.agg.cell_valid == 1) {
            agg_cell.read(meta.agg.state, meta.agg.cell);
            if (hdr.agg.flags & AGG_FLAG_SERVER != 0) {
                // The server's result for a block that fell back frees its cell.
                if (hdr.agg.flags & AGG_FLAG_RESULT != 0 && AGG_CELL_JOB(meta.agg.state) == hdr.agg.job
                        && AGG_CELL_SEQ(meta.agg.state) == hdr.agg.seq) {
                    agg_events.count(AGG_EVENT_RELEASED);
                    agg_cell.write(meta.agg.cell, 0);
                }
            } else if (hdr.agg.flags & AGG_FLAG_FALLBACK != 0 && meta.agg.trees != 0) {
                // Over trees the switches above know switches, not workers: the server checks the sender.
                agg_events.count(AGG_EVENT_FALLBACK);   // routed on to the server
            } else if (agg_worker.apply().hit) {     // a miss: DROP_AGG_NOT_WORKER
                if (hdr.udp.length != meta.agg.udp_length) {
                    if (hdr.udp.length == AGG_UDP_LENGTH_HEAD || hdr.udp.length == AGG_UDP_LENGTH_FULL) {
                        meta.drop_reason = DROP_AGG_BLOCK_SIZE;     // a block, not the job's size
                    } else {
                        meta.drop_reason = DROP_AGG_BAD_LENGTH;
                    }
                } else if (hdr.agg.flags & AGG_FLAG_FALLBACK != 0) {
                    agg_events.count(AGG_EVENT_FALLBACK);   // routed on to the server
                } else if (AGG_CELL_JOB(meta.agg.state) == hdr.agg.job && AGG_CELL_SEQ(meta.agg.state) == hdr.agg.seq) {
                    if (AGG_CELL_BITMAP(meta.agg.state) & meta.agg.worker_bit != 0) {
                        if (AGG_CELL_STATUS(meta.agg.state) & AGG_CELL_DONE != 0) {
                            AGG_LANES_READ
                            meta.agg.answer = AGG_ANSWER_AGAIN;
                        } else {
                            agg_events.count(AGG_EVENT_DUPLICATE);
                            absorb();
                        }
                    } else {
                        add_contribution();
                        AGG_LANES_ADD
                        if (meta.agg.overflow != 0) {
                            note_overflow();
                        }
                        if (hdr.agg.exponent > AGG_CELL_EXPONENT(meta.agg.state)) {
                            AGG_CELL_EXPONENT(meta.agg.state) = hdr.agg.exponent;
                        }
                        note_added();
                    }
                } else if (meta.agg.shared == 0 && AGG_CELL_JOB(meta.agg.state) == hdr.agg.job
                           && AGG_CELL_SEQ(meta.agg.state) > hdr.agg.seq
                           && std_meta.ingress_global_timestamp - AGG_CELL_STARTED(meta.agg.state) <= meta.agg.steal_after) {
                    agg_events.count(AGG_EVENT_STALE);
                    absorb();
                } else if (AGG_CELL_JOB(meta.agg.state) == 0 || AGG_CELL_STATUS(meta.agg.state) & AGG_CELL_DONE != 0
                           || (meta.agg.shared == 0 && AGG_CELL_JOB(meta.agg.state) == hdr.agg.job)
                           || std_meta.ingress_global_timestamp - AGG_CELL_STARTED(meta.agg.state) > meta.agg.steal_after) {
                    start_use();
                    AGG_LANES_START
                    note_added();
                } else {
                    agg_events.count(AGG_EVENT_COLLISION);
                    hdr.agg.flags = hdr.agg.flags | AGG_FLAG_COLLISION;   // routed on to the server
                }
            }
        }
        if (meta.agg.added == 1) {
            agg_events.count(AGG_EVENT_CONTRIBUTION);
            if (AGG_CELL_COUNT(meta.agg.state) == meta.agg.workers) {
                AGG_CELL_STATUS(meta.agg.state) = AGG_CELL_STATUS(meta.agg.state) | AGG_CELL_DONE;
                agg_cell.write(meta.agg.cell, meta.agg.state);
                agg_events.count(AGG_EVENT_COMPLETE);
                meta.agg.answer = AGG_ANSWER_ALL;
            } else {
                agg_cell.write(meta.agg.cell, meta.agg.state);
                absorb();
            }
        }
        // The packet carries a completed cell's sum: below the root of the
        // block's tree it goes up as a partial (the parent answers a
        // retransmission); at the root it is the result.
        if (meta.agg.answer != 0) {
            if (agg_up.apply().hit) {
                if (meta.agg.answer == AGG_ANSWER_ALL) {
                    agg_events.count(AGG_EVENT_PARTIAL_UP);
                } else {
                    agg_events.count(AGG_EVENT_PARTIAL_AGAIN);
                }
            } else if (meta.agg.answer == AGG_ANSWER_ALL) {
                if (AGG_CELL_STATUS(meta.agg.state) & AGG_CELL_OVERFLOW != 0) {
                    agg_events.count(AGG_EVENT_OVERFLOW);
                }
                send_result(meta.agg.job_group);
            } else {
                agg_events.count(AGG_EVENT_RESULT_AGAIN);
                send_result(meta.agg.worker_group);
            }
        }
    }
}

// Egress of a result replica: the worker it goes to, by replication id.
control AggregationEgress(inout headers_t hdr, in standard_metadata_t std_meta) {
    action to_worker(ipv4_addr_t worker, mac_addr_t src_mac, mac_addr_t dst_mac) {
        hdr.ipv4.dst_addr = worker;
        hdr.ethernet.src_addr = src_mac;
        hdr.ethernet.dst_addr = dst_mac;
    }
    table agg_replica {
        key = { std_meta.egress_rid: exact; }
        actions = { to_worker; @defaultonly NoAction; }
        const default_action = NoAction;
        size = 4096;
    }
    apply {
        agg_replica.apply();
    }
}

#endif
