// IPv4 forwarding: LPM route -> next-hop id -> ECMP member (egress port and
// MAC rewrite), TTL decrement with drop at expiry.
//
// ipv4_lpm maps a destination prefix to a next_id. next_hop maps the next_id
// to an action profile member (one next hop) or group (ECMP). The group
// member is picked by a hash of the 5-tuple, so one flow always takes one
// path. The control plane keeps each group at a fixed number of slots
// (control/forwarding.py), so removing a next hop re-homes only the flows
// that used it.
//
// Hash polarization: with the same (linear, CRC) hash on every switch, a
// flow's choice at one tier fixes its choice at the next, and in a fat tree
// half the cores carried nothing. Each switch therefore mixes the 5-tuple
// hash with its own seed (ecmp_seed, set by the controller) through a
// multiplication, which is not linear in the hash bits, before the selector.
// A seed needs many set bits: with seed 1 the key keeps only 8 hash bits and
// 64 flows reached half of a 4-way group.
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

    bit<16> ecmp_seed = ECMP_DEFAULT_SEED;

    action set_ecmp_seed(bit<16> seed) {
        ecmp_seed = seed;
    }

    // Keyless: the controller sets the default action, one seed per switch.
    table ecmp_seed_config {
        key = { }
        actions = {
            set_ecmp_seed;
        }
        default_action = set_ecmp_seed(ECMP_DEFAULT_SEED);
        size = 1;
    }

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
            meta.next_id:  exact;
            meta.ecmp_key: selector;
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
        ecmp_seed_config.apply();
        bit<16> flow_hash;
        hash(flow_hash, HashAlgorithm.crc16, 16w0,
             { hdr.ipv4.src_addr, hdr.ipv4.dst_addr, hdr.ipv4.protocol,
               meta.l4_src_port, meta.l4_dst_port }, 32w65536);
        bit<32> mixed = (bit<32>) flow_hash * (bit<32>) (ecmp_seed | 1);
        meta.ecmp_key = mixed[23:8];
        // A selector table cannot carry a default action on BMv2: a miss
        // (route to a next_id that has no entry) is handled here.
        if (!next_hop.apply().hit) {
            meta.drop_reason = DROP_NO_ROUTE;
        }
    }
}

#endif
