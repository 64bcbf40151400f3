// IPv4 forwarding: LPM route -> next hop (egress port and MAC rewrite) or
// ECMP group -> one of its slots (by 5-tuple hash, or by the group's load
// balancing mode: load_balancing.p4), TTL decrement; a flow the central
// controller assigned a path leaves by that path's port (central_routing.p4).
//
// ipv4_lpm maps a destination prefix either straight to a next hop (route)
// or to an ECMP group (set_next_id). A group has ECMP_SLOTS slots, entries
// (next_id, slot) -> route in next_hop; the slot is taken from a hash of the
// 5-tuple, so one flow always takes one path. The control plane keeps the
// slot count fixed (core/forwarding.py), so removing a next hop re-homes
// only the flows of its slots (resilient hashing).
//
// Why slots in an exact table and not a P4 action_selector: on BMv2 built
// with its default logging macros, every table hit formats the hit entry
// into a string even at log level off, and a selector's entry (group and
// member) is the costliest to format; with the selector the fabric spent a
// fifth of its per-packet instructions there (README, Benchmark). The slot
// table also leaves the choice of slot to P4, which is where load-balancing
// modes beyond ECMP plug in.
//
// Hash polarization: with the same (linear, CRC) hash on every switch, a
// flow's choice at one tier fixes its choice at the next, and in a fat tree
// half the cores carried nothing. Each switch therefore mixes the 5-tuple
// hash with its own seed (the default action of ecmp_hash, set by the
// controller) through a multiplication, which is not linear in the hash
// bits, and takes the slot from a CRC of the product.
#ifndef FORWARDING_P4
#define FORWARDING_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"
#include "flow_key.p4"
#ifndef WITHOUT_LOAD_BALANCING
#include "load_balancing.p4"
#endif
#ifndef WITHOUT_FAILOVER
#include "failover.p4"
#endif
#ifndef WITHOUT_CENTRAL_ROUTING
#include "central_routing.p4"
#endif

control Forwarding(inout headers_t hdr,
                   inout local_metadata_t meta,
                   inout standard_metadata_t std_meta) {
#ifndef WITHOUT_LOAD_BALANCING
    LoadBalancing() load_balancing;
#endif
#ifndef WITHOUT_FAILOVER
    Failover() failover;
#endif
#ifndef WITHOUT_CENTRAL_ROUTING
    CentralRouting() central_routing;
#endif
    direct_counter(CounterType.packets) next_hop_packets;   // per (group, slot): what each member got

    // The slot of a flow in its ECMP group, from the 5-tuple hash and this
    // switch's seed: one keyless table whose default action the controller
    // sets, applied only to packets routed to a group.
    action hash_flow(bit<16> seed) {
        meta.ecmp.setValid();
        hash(meta.ecmp.mixed, HashAlgorithm.crc16, 32w0, meta.flow, 32w65536);
        // The product is not linear in the hash bits; a CRC over it spreads
        // every bit of it into the slot (a slice of the product alone left
        // some pairs of switches correlated: tests/unit/test_ecmp_slots.py).
        meta.ecmp.mixed = meta.ecmp.mixed * (bit<32>) (seed | 1);
        // Over the header (its one field), not { meta.ecmp.mixed }: a list
        // costs a metadata temporary. The slot is the CRC's low bits.
        hash(meta.ecmp_slot, HashAlgorithm.crc16, 32w0, meta.ecmp, 32w65536);
    }

    table ecmp_hash {
        key = { }
        actions = {
            hash_flow;
        }
        default_action = hash_flow(ECMP_DEFAULT_SEED);
        size = 1;
    }

    FlowKey() flow_key;

    // headers.p4: a validated scratch header counts in the packet length.
    // The flow key stays for the controls after forwarding (headers.p4).
    action release_ecmp() {
        meta.ecmp.setInvalid();
    }

    action route(port_t port, mac_addr_t src_mac, mac_addr_t dst_mac) {
        std_meta.egress_spec = port;
        hdr.ethernet.src_addr = src_mac;
        hdr.ethernet.dst_addr = dst_mac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    action set_next_id(next_id_t next_id) {
        meta.next_id = next_id;
    }

    // A route miss is dropped: the default action itself names the reason
    // (a branch on NoAction would run a table of its own for the assignment).
    action no_route() {
        meta.drop_reason = DROP_NO_ROUTE;
    }

    table ipv4_lpm {
        key = {
            hdr.ipv4.dst_addr: lpm;
        }
        actions = {
            route;
            set_next_id;
            @defaultonly no_route;
        }
        default_action = no_route();
        size = IPV4_LPM_TABLE_SIZE;
    }

    table next_hop {
        key = {
            meta.next_id:   exact;
            meta.ecmp_slot: exact;
        }
        actions = {
            route;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        counters = next_hop_packets;
        size = NEXT_HOP_TABLE_SIZE;
    }

    // TTL is checked by the caller. A packet that cannot be routed gets
    // DROP_NO_ROUTE. Branches follow table hits and actions, which BMv2
    // takes without evaluating an expression.
    apply {
        switch (ipv4_lpm.apply().action_run) {
            set_next_id: {
                flow_key.apply(hdr, meta);
                ecmp_hash.apply();
#ifndef WITHOUT_LOAD_BALANCING
                load_balancing.apply(hdr, meta, std_meta);   // the group's mode may pick another slot
#endif
                if (!next_hop.apply().hit) {
                    meta.drop_reason = DROP_NO_ROUTE;
                } else {
#ifndef WITHOUT_FAILOVER
                    failover.apply(hdr, meta, std_meta);     // a dead member's port: its backup
#endif
#ifndef WITHOUT_CENTRAL_ROUTING
                    central_routing.apply(hdr, meta, std_meta);   // a flow with an assigned path: its port
#endif
                }
                release_ecmp();
            }
        }
    }
}

#endif
