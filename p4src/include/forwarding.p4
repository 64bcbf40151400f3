// IPv4 forwarding: LPM route -> next-hop id -> ECMP member (egress port and
// MAC rewrite), TTL decrement with drop at expiry.
//
// ipv4_lpm maps a destination prefix to a next_id. next_hop maps the next_id
// to an action profile member (one next hop) or group (ECMP). The group
// member is picked by a hash of the 5-tuple (the `selector` keys), so one
// flow always takes one path. The control plane keeps each group at a fixed
// number of slots (control/forwarding.py), so removing a next hop re-homes
// only the flows that used it.
#ifndef FORWARDING_P4
#define FORWARDING_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

control Forwarding(inout headers_t hdr,
                   inout local_metadata_t meta,
                   inout standard_metadata_t std_meta) {

    // Named instance: P4Runtime needs the selector as its own action profile.
    action_selector(HashAlgorithm.crc16, ECMP_SELECTOR_SIZE, ECMP_HASH_WIDTH) ecmp_selector;

    action set_next_id(next_id_t next_id) {
        meta.next_id = next_id;
    }

    action drop_no_route() {
        meta.drop_reason = DROP_NO_ROUTE;
    }

    table ipv4_lpm {
        key = {
            hdr.ipv4.dst_addr: lpm;
        }
        actions = {
            set_next_id;
            drop_no_route;
        }
        default_action = drop_no_route();
        size = IPV4_LPM_TABLE_SIZE;
    }

    action route(port_t port, mac_addr_t src_mac, mac_addr_t dst_mac) {
        std_meta.egress_spec = port;
        hdr.ethernet.src_addr = src_mac;
        hdr.ethernet.dst_addr = dst_mac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    table next_hop {
        key = {
            meta.next_id:      exact;
            hdr.ipv4.src_addr: selector;
            hdr.ipv4.dst_addr: selector;
            hdr.ipv4.protocol: selector;
            meta.l4_src_port:  selector;
            meta.l4_dst_port:  selector;
        }
        actions = {
            route;
        }
        implementation = ecmp_selector;
        size = NEXT_HOP_TABLE_SIZE;
    }

    apply {
        if (hdr.ipv4.ttl <= 1) {
            meta.drop_reason = DROP_TTL_EXPIRED;
            return;
        }
        ipv4_lpm.apply();
        if (meta.drop_reason != DROP_NONE) {
            return;
        }
        // A selector table cannot carry a default action on BMv2: a miss
        // (route to a next_id that has no entry) is handled here.
        if (!next_hop.apply().hit) {
            meta.drop_reason = DROP_NO_ROUTE;
        }
    }
}

#endif
