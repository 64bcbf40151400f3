// Load balancing beyond ECMP: how a packet routed to an ECMP group picks its
// slot (forwarding.p4 then routes it through next_hop[(group, slot)]).
//
// lb_group, keyed by the group, gives its mode; no entry is plain ECMP (the
// 5-tuple hash), at the cost of one exact lookup:
//   flowlet(gap_us)     a flow keeps its slot while its packets come closer
//                       than gap_us; after a longer gap a new flowlet picks a
//                       slot at random (LetFlow); state per flow-hash cell
//   spray()             every packet picks a slot at random
//   adaptive(stale_us)  every packet samples a slot at random and its
//                       neighbour (slot ^ 1), and takes the one whose egress
//                       port's queue was shorter (DRILL's power of two
//                       choices). The controller deals slots to members round
//                       robin, so neighbours belong to different members (two
//                       independent samples would pick the same member half
//                       the time with two members). A port's queue is the
//                       depth the last adaptive packet leaving it saw,
//                       forgotten after stale_us (a port nobody picks drains)
// Random slots are uniform over the 16 slots; the controller spreads a
// group's members over them (16/n slots each, +-1), and a removed member has
// no slot left, so it is never chosen. Adaptive needs the port of a sampled
// slot before choosing: lb_candidate_a/b mirror next_hop's ports for the
// adaptive groups (the controller writes them with the group).
#ifndef LOAD_BALANCING_P4
#define LOAD_BALANCING_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

// Per-port queue depth for adaptive mode: written in egress (LoadRecorder),
// read in ingress (LoadBalancing), so declared outside both.
register<qdepth_t, port_t>(PORT_COUNT) lb_port_qdepth;
register<bit<48>, port_t>(PORT_COUNT) lb_port_qdepth_time;     // us, when it was written

control LoadBalancing(inout headers_t hdr,
                      inout local_metadata_t meta,
                      in standard_metadata_t std_meta) {
    register<bit<32>, bit<32>>(FLOWLET_CELLS) flowlet_last_seen;    // us, 0 = never
    register<ecmp_slot_t, bit<32>>(FLOWLET_CELLS) flowlet_slot;      // the current flowlet's slot
    counter<next_id_t>(LB_GROUPS, CounterType.packets) flowlets_started;

    action flowlet(bit<32> flowlet_gap_us) {
        meta.lb.setValid();
        meta.lb.gap_us = flowlet_gap_us;
    }

    action spray() {
        random(meta.ecmp_slot, 0, (ecmp_slot_t) (ECMP_SLOTS - 1));
    }

    action adaptive(bit<32> queue_stale_us) {
        meta.lb.setValid();
        meta.lb.stale_us = queue_stale_us;
        random(meta.lb.sample_a, 0, (ecmp_slot_t) (ECMP_SLOTS - 1));
        meta.lb.sample_b = meta.lb.sample_a ^ 1;    // its neighbour: another member (see above)
        meta.lb.port_a = 0;                         // a sample without a candidate entry: port 0
        meta.lb.port_b = 0;
        meta.egress_work = meta.egress_work | EGRESS_LB_LOAD;
    }

    table lb_group {
        key = {
            meta.next_id: exact;
        }
        actions = {
            flowlet;
            spray;
            adaptive;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = LB_GROUPS;
    }

    action candidate_a(port_t port) { meta.lb.port_a = port; }
    action candidate_b(port_t port) { meta.lb.port_b = port; }

    table lb_candidate_a {
        key = {
            meta.next_id:     exact;
            meta.lb.sample_a: exact;
        }
        actions = { candidate_a; @defaultonly NoAction; }
        const default_action = NoAction();
        size = NEXT_HOP_TABLE_SIZE;
    }

    table lb_candidate_b {
        key = {
            meta.next_id:     exact;
            meta.lb.sample_b: exact;
        }
        actions = { candidate_b; @defaultonly NoAction; }
        const default_action = NoAction();
        size = NEXT_HOP_TABLE_SIZE;
    }

    action new_flowlet() {
        random(meta.ecmp_slot, 0, (ecmp_slot_t) (ECMP_SLOTS - 1));
        flowlet_slot.write(meta.lb.cell, meta.ecmp_slot);
        flowlets_started.count(meta.next_id);
    }

    action same_flowlet() {
        flowlet_slot.read(meta.ecmp_slot, meta.lb.cell);
    }

    // Applied after ecmp_hash: meta.ecmp_slot holds the flow's ECMP slot,
    // which the group's mode may replace.
    apply {
        switch (lb_group.apply().action_run) {
            flowlet: {
                hash(meta.lb.cell, HashAlgorithm.crc32, 32w0, meta.flow, FLOWLET_CELLS);   // forwarding filled meta.flow
                meta.lb.now = (bit<32>) std_meta.ingress_global_timestamp;
                if (meta.lb.now == 0) {
                    meta.lb.now = 1;            // stored times are >= 1: 0 means never
                }
                flowlet_last_seen.read(meta.lb.last, meta.lb.cell);
                flowlet_last_seen.write(meta.lb.cell, meta.lb.now);
                if (meta.lb.last == 0 || meta.lb.now - meta.lb.last > meta.lb.gap_us) {
                    new_flowlet();
                } else {
                    same_flowlet();
                }
                meta.lb.setInvalid();           // headers.p4: out of the packet length
            }
            adaptive: {
                lb_candidate_a.apply();
                lb_candidate_b.apply();
                lb_port_qdepth.read(meta.lb.depth_a, meta.lb.port_a);
                lb_port_qdepth.read(meta.lb.depth_b, meta.lb.port_b);
                lb_port_qdepth_time.read(meta.lb.time_a, meta.lb.port_a);
                lb_port_qdepth_time.read(meta.lb.time_b, meta.lb.port_b);
                // Stale: recorded longer than stale_us before this packet arrived. A record
                // may be newer than the arrival (BMv2 stamps a packet when it is received,
                // and egress keeps recording while ingress works through a backlog):
                // `arrival - recorded` would wrap and call the newest record stale.
                if (std_meta.ingress_global_timestamp > meta.lb.time_a + (bit<48>) meta.lb.stale_us) {
                    meta.lb.depth_a = 0;
                }
                if (std_meta.ingress_global_timestamp > meta.lb.time_b + (bit<48>) meta.lb.stale_us) {
                    meta.lb.depth_b = 0;
                }
                if (meta.lb.depth_b < meta.lb.depth_a) {
                    meta.ecmp_slot = meta.lb.sample_b;
                } else {
                    meta.ecmp_slot = meta.lb.sample_a;
                }
                meta.lb.setInvalid();
            }
        }
    }
}

// Egress: the queue depth adaptive packets see, per port, for LoadBalancing.
control LoadRecorder(in standard_metadata_t std_meta) {
    apply {
        lb_port_qdepth.write(std_meta.egress_port, std_meta.enq_qdepth);
        lb_port_qdepth_time.write(std_meta.egress_port, std_meta.egress_global_timestamp);
    }
}

#endif
