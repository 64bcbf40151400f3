// Non-minimal routing on low-diameter topologies (Dragonfly, Slim Fly,
// torus): Valiant and UGAL-L at the source router, a Valiant tag in the
// packet for the switches after it.
//
// Valiant (Valiant and Brebner; on the Dragonfly as Kim et al. give it): a
// packet goes minimally to an intermediate drawn at random, a Dragonfly
// group or a switch, then minimally to its destination. The source router
// (a packet from a host port to a destination the controller lists in
// valiant_source) draws the intermediate from the flow's hash, so a flow
// keeps one intermediate and its order, and pushes a tag naming it between
// Ethernet and IPv4 (EtherType 0x88B6). Every switch routes a tagged packet
// toward its target (valiant_route: an ECMP set of 16 slots per target, the
// slot from the flow's hash and the switch's seed) until the first switch of
// the intermediate removes the tag; from there it is routed as any packet.
//
// Dimension-order routing (a torus): the source router gives the tag a
// fixed target instead of a drawn one, the switch that shares the
// destination's x and its own other coordinates: the shortest paths to it
// move in x only, and from there to the destination in y (and z) only.
//
// UGAL-L (Kim et al.): the source router takes the minimal path unless the
// minimal port's queue times the minimal path's hops exceeds the
// non-minimal port's queue times its hops by more than a threshold. A
// port's queue is the depth the last packet leaving it saw, recorded in the
// load balancer's registers (load_balancing.p4: every packet records while
// UGAL is on, and a record older than stale_us counts as 0). The choice is
// made per packet: a flow's packets may take the two paths. Stale means
// recorded more than stale_us before the packet arrived (arrival > recorded
// + stale_us), not arrival - recorded > stale_us: BMv2 stamps a packet on
// receipt and egress records with its own, later time, so behind a backlog
// the newest record is later than the arrival, and the subtraction would
// wrap and call it stale (load_balancing.p4 had the same bug).
//
// Forwarding has routed the packet minimally before this control runs;
// the route toward the intermediate replaces that route's port and MACs
// (TTL was decremented once). Off: one keyless table miss, plus the tag's
// and the scratch header's instances that BMv2 resets for every packet.
// On, an untagged packet that is not at its source router costs a table
// miss more; the flow's hash is computed only for a packet that is or may
// be tagged (the switch's seed comes with the source entry, or from
// valiant_transit).
#ifndef NONMINIMAL_ROUTING_P4
#define NONMINIMAL_ROUTING_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"
#include "flow_key.p4"
#ifndef WITHOUT_LOAD_BALANCING
#include "load_balancing.p4"
#endif

control NonminimalRouting(inout headers_t hdr,
                          inout local_metadata_t meta,
                          inout standard_metadata_t std_meta) {
    // NONMINIMAL_*: tags pushed, packets UGAL kept minimal, tags removed at the intermediate
    counter<bit<32>>(NONMINIMAL_COUNTS, CounterType.packets) nonminimal_packets;

    FlowKey() flow_key;

    action flow_hash(bit<32> seed) {       // apply filled meta.flow
        meta.nonmin.setValid();
        hash(meta.nonmin.flow_hash, HashAlgorithm.crc32, 32w0, meta.flow, 32w0xFFFFFFFF);
        meta.nonmin.flow_hash = meta.nonmin.flow_hash * (seed | 1);   // not linear in the hash: see forwarding.p4
    }

    action valiant_on() {
    }

    action ugal_on() {
        meta.egress_work = meta.egress_work | EGRESS_LB_LOAD;   // every packet records its port's queue
    }

    table nonminimal_routing {
        key = { }
        actions = {
            valiant_on;
            ugal_on;
            NoAction;
        }
        default_action = NoAction();
        size = 1;
    }

    action push_tag() {
        hdr.valiant.setValid();
        hdr.valiant.target = meta.nonmin.target;
        hdr.valiant.ether_type = hdr.ethernet.ether_type;
        hdr.ethernet.ether_type = ETHERTYPE_VALIANT;
        nonminimal_packets.count(NONMINIMAL_PUSHED);
    }

    // The slot toward the intermediate: a hash of the flow's (seeded) hash
    // and the target, the scratch header's other fields still zero, so the
    // source and every switch after it compute it alike.
    action slot() {
        hash(meta.ecmp_slot, HashAlgorithm.crc16, 32w0, meta.nonmin, ECMP_SLOTS);
    }

    // A tagged packet from another switch: its slot toward the tag's target.
    action transit(bit<32> seed) {
        flow_hash(seed);
        meta.nonmin.target = hdr.valiant.target;
        slot();
    }

    table valiant_transit {
        key = { }
        actions = {
            transit;
            NoAction;
        }
        default_action = NoAction();
        size = 1;
    }

    // The intermediate, one of `targets` (0..targets-1), for the flow; its slot.
    action draw(bit<16> targets) {       // over the 5-tuple: a hash over meta.nonmin into it would cost a copy
        hash(meta.nonmin.target, HashAlgorithm.crc16, 16w0, meta.flow, targets);
        slot();
    }

    action valiant(bit<16> targets, bit<32> seed) {
        flow_hash(seed);
        draw(targets);
        push_tag();
    }

    // Dimension-order routing on a torus: the intermediate is given, the
    // switch in the destination's column and this switch's row (x first).
    action via(bit<16> target, bit<32> seed) {
        flow_hash(seed);
        meta.nonmin.target = target;
        slot();
        push_tag();
    }

    action ugal(bit<16> targets, bit<8> min_hops, bit<32> threshold, bit<48> stale_us, bit<32> seed) {
        flow_hash(seed);
        draw(targets);
        meta.nonmin.min_hops = min_hops;
        meta.nonmin.threshold = threshold;
        meta.nonmin.stale_us = stale_us;
    }

    // Key: a host port, a destination the non-minimal route may take.
    table valiant_source {
        key = {
            std_meta.ingress_port: exact;
            hdr.ipv4.dst_addr:     lpm;
        }
        actions = {
            valiant;
            via;
            ugal;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = VALIANT_SOURCE_TABLE_SIZE;
    }


    action candidate(port_t port, bit<8> hops) {
        meta.nonmin.nonmin_port = port;
        meta.nonmin.nonmin_hops = hops;
    }

    // UGAL at the source: the first port toward the drawn intermediate, and
    // the non-minimal path's hops. No entry: the intermediate is here.
    table valiant_candidate {
        key = {
            meta.nonmin.target: exact;
            meta.ecmp_slot:     exact;
        }
        actions = {
            candidate;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = VALIANT_ROUTE_TABLE_SIZE;
    }

    action to_intermediate(port_t port, mac_addr_t src_mac, mac_addr_t dst_mac) {
        std_meta.egress_spec = port;
        hdr.ethernet.src_addr = src_mac;
        hdr.ethernet.dst_addr = dst_mac;
    }

    action at_intermediate() {
        hdr.ethernet.ether_type = hdr.valiant.ether_type;
        hdr.valiant.setInvalid();
        nonminimal_packets.count(NONMINIMAL_REACHED);
    }

    table valiant_route {
        key = {
            hdr.valiant.target: exact;
            meta.ecmp_slot:     exact;
        }
        actions = {
            to_intermediate;
            at_intermediate;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = VALIANT_ROUTE_TABLE_SIZE;
    }

    apply {
        switch (nonminimal_routing.apply().action_run) {
            valiant_on:
            ugal_on: {
                if (!meta.flow.isValid()) {      // forwarding filled it for a group's packet
                    flow_key.apply(hdr, meta);
                }
                if (!hdr.valiant.isValid()) {
                    switch (valiant_source.apply().action_run) {
#ifndef WITHOUT_LOAD_BALANCING
                        ugal: {
                            if (valiant_candidate.apply().hit) {
                                lb_port_qdepth.read(meta.nonmin.min_depth, std_meta.egress_spec);
                                lb_port_qdepth.read(meta.nonmin.nonmin_depth, meta.nonmin.nonmin_port);
                                lb_port_qdepth_time.read(meta.nonmin.min_time, std_meta.egress_spec);
                                lb_port_qdepth_time.read(meta.nonmin.nonmin_time, meta.nonmin.nonmin_port);
                                if (std_meta.ingress_global_timestamp > meta.nonmin.min_time + meta.nonmin.stale_us) {
                                    meta.nonmin.min_depth = 0;
                                }
                                if (std_meta.ingress_global_timestamp > meta.nonmin.nonmin_time + meta.nonmin.stale_us) {
                                    meta.nonmin.nonmin_depth = 0;
                                }
                                if ((bit<32>) meta.nonmin.min_depth * (bit<32>) meta.nonmin.min_hops
                                        > (bit<32>) meta.nonmin.nonmin_depth * (bit<32>) meta.nonmin.nonmin_hops
                                          + meta.nonmin.threshold) {
                                    push_tag();
                                } else {
                                    nonminimal_packets.count(NONMINIMAL_MINIMAL);
                                }
                            } else {
                                nonminimal_packets.count(NONMINIMAL_MINIMAL);
                            }
                        }
#endif
                    }
                } else {
                    valiant_transit.apply();
                }
                if (hdr.valiant.isValid()) {
                    valiant_route.apply();
                }
                meta.nonmin.setInvalid();        // headers.p4: out of the packet length
            }
        }
    }
}

#endif
