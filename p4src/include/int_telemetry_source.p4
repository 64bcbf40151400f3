// INT source (INT v2.1, INT-MD): the first-hop switch inserts the INT shim
// and INT-MD header into the packets of watchlisted flows; its egress then
// pushes its own metadata like every transit hop (int_telemetry_egress.p4).
//
// Sampling, so that a packet INT leaves alone costs next to nothing:
// int_source_port (exact on the ingress port: the ports facing hosts)
// counts the packets entering there (sample_port: 1 in sample_one_in) and
// looks up only the N-th, whose count went back to 0, in the watchlist
// (every_packet: each packet, nothing counted). A port whose flows are
// raised (adaptive sampling, telemetry/adaptive_sampling.py) first looks
// its packets up in int_raised_flow (exact 5-tuple): a hit carries INT and
// is not counted, so the port's other packets stay exactly 1 in N. A
// raised port's count waits where it was until the port is lowered.
//
// int_watchlist matches the 5-tuple (ternary addresses and protocol, L4 port
// ranges) and the ingress port. An entry gives the instruction bitmap, HopML
// (checked by the controller against the bitmap), the hop budget and a rate
// of its own, 1 in sample_one_in counted by its sampler (a cell of
// int_sample_count), for a port whose rules sample at different rates (the
// port then looks up every packet). The controller puts a port's common
// rate where it is cheapest: in int_source_port. Counting, not drawing:
// exactly 1 in N over any N packets; traffic whose pattern repeats with a
// period that divides N (k flows sent in turn, k dividing N) is sampled in
// the same flow each time. A packet that already carries INT is looked up
// in neither table (the watchlist's key includes the shim's validity too);
// a port without raised flows counts it.
//
// INT on at a switch is int_source_port's default action, transit_port
// (NoAction: off): one exact lookup decides both whether INT is on and
// what a host's port does, and a packet INT is off for costs one miss.
//
// Detection (docs/protocols/int_telemetry.md): UDP gets destination port INT_UDP_PORT and keeps
// the original port in the shim (NPT 1); TCP gets DSCP INT_DSCP and keeps
// the original DSCP in the shim (NPT 0). A port or a DSCP, not a new IP
// protocol: firewalls and host stacks still see TCP/UDP, and an L4 checksum
// stays computable.
#ifndef INT_SOURCE_P4
#define INT_SOURCE_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"
#include "flow_key.p4"

// The INT headers in front of a packet a source takes, after the INT-MD
// header a rule (or a raised flow's entry) filled: the shim after the L4
// header, TCP and UDP only (the watchlist's protocols); and INT's egress
// work (EGRESS_INT: push this hop). A control without
// tables, so that IntSource applies it where each of its two tables takes
// a packet, and a packet it does not take meets no condition for it.
control IntInsert(inout headers_t hdr, inout local_metadata_t meta) {
    // The shim (setValid zeroed the fields not written: rsvd here, d, e, m
    // and rsvd in the INT-MD header) and the lengths, for UDP: destination
    // port INT_UDP_PORT, the original in the shim.
    action insert_into_udp() {
        meta.egress_work = meta.egress_work | EGRESS_INT;
        hdr.int_shim.setValid();
        hdr.int_shim.int_type = INT_TYPE_MD;
        hdr.int_shim.len = INT_HEADER_WORDS;
        hdr.int_shim.npt = INT_NPT_UDP_PORT;
        hdr.int_shim.npt_field = hdr.udp.dst_port;
        hdr.udp.dst_port = INT_UDP_PORT;
        hdr.udp.length = hdr.udp.length + INT_SHIM_AND_HEADER_BYTES;
        hdr.ipv4.total_len = hdr.ipv4.total_len + INT_SHIM_AND_HEADER_BYTES;
        meta.telemetry.l4_checksum = 1;
    }

    // For TCP: DSCP INT_DSCP, the original in the shim.
    action insert_into_tcp() {
        meta.egress_work = meta.egress_work | EGRESS_INT;
        hdr.int_shim.setValid();
        hdr.int_shim.int_type = INT_TYPE_MD;
        hdr.int_shim.len = INT_HEADER_WORDS;
        hdr.int_shim.npt = INT_NPT_DSCP;
        hdr.int_shim.npt_field = (bit<16>) (hdr.ipv4.dscp ++ 2w0);
        hdr.ipv4.dscp = INT_DSCP;
        hdr.ipv4.total_len = hdr.ipv4.total_len + INT_SHIM_AND_HEADER_BYTES;
        meta.telemetry.l4_checksum = 1;
    }

    // Neither TCP nor UDP: no INT-MD header after all.
    action drop_int_md() {
        hdr.int_md.setInvalid();
    }

    apply {
        if (hdr.udp.isValid()) {
            insert_into_udp();
        } else if (hdr.tcp.isValid()) {
            insert_into_tcp();
        } else {
            drop_int_md();
        }
    }
}

control IntSource(inout headers_t hdr,
                  inout local_metadata_t meta,
                  in standard_metadata_t std_meta) {
    // Packets each host port and each watchlist entry counted since their
    // last sampled one (the ingress pipeline is one thread in simple_switch:
    // a read and a write in two actions do not race).
    register<bit<32>, port_t>(PORT_COUNT) int_port_sample_count;
    register<bit<32>, int_sampler_t>(INT_WATCHLIST_SIZE) int_sample_count;

    // A watchlist rule's (or a raised flow's) parameters, straight into the
    // INT-MD header the packet carries if it is sampled: BMv2 pays for every
    // field it writes (docs/benchmark.md), so no scratch copy in between.
    action md_from_rule(bit<8> max_hop_count, bit<5> hop_metadata_words, bit<16> instruction_bitmap,
                        bit<16> ds_id, bit<16> ds_instruction, bit<16> ds_flags) {
        hdr.int_md.setValid();
        hdr.int_md.ver = INT_VERSION;
        hdr.int_md.hop_ml = hop_metadata_words;
        hdr.int_md.remaining_hop_cnt = max_hop_count;
        hdr.int_md.instruction_bitmap = instruction_bitmap;
        hdr.int_md.ds_id = ds_id;
        hdr.int_md.ds_instruction = ds_instruction;
        hdr.int_md.ds_flags = ds_flags;
    }

    // The port's count with this packet, in the sampling metadata and back
    // in the register: 0 at the N-th (SAMPLE_COUNT: no condition, and the
    // register written from a field, not an expression, for which p4c would
    // add a metadata temporary every packet pays for).
    action count_at_port(bit<32> sample_one_in) {
        int_port_sample_count.read(meta.int_sampling.count, std_meta.ingress_port);
        meta.int_sampling.count = SAMPLE_COUNT(meta.int_sampling.count, sample_one_in);
        int_port_sample_count.write(std_meta.ingress_port, meta.int_sampling.count);
    }

    // Each of the port's actions has egress count the packet's bytes (the
    // port's tx bytes); a packet that carries INT gets INT's egress work too
    // (EGRESS_INT: IntInsert, carries_int). Apart, so that the usual packet
    // where INT is on costs egress no INT condition (main.p4).
    action sample_port(bit<32> sample_one_in) {
        meta.egress_work = meta.egress_work | EGRESS_INT_TX_BYTES;
        count_at_port(sample_one_in);
    }

    // A rate of 1 (a raised port, or rules that sample every packet or
    // count at their own rates): every packet looked up, none counted
    // (the count is metadata: 0 for every packet until written).
    action every_packet() {
        meta.egress_work = meta.egress_work | EGRESS_INT_TX_BYTES;
    }

    // A port with raised flows: they are looked up first; the rate is kept
    // for the packets that are not theirs (non-zero: says so below).
    action sample_port_after_raised_flows(bit<32> sample_one_in) {
        meta.egress_work = meta.egress_work | EGRESS_INT_TX_BYTES;
        meta.int_sampling.sample_one_in = sample_one_in;
    }

    // INT on, at a port not facing a host: egress counts the bytes (and
    // pushes this hop or sinks if the packet carries INT: carries_int); the
    // flow key forwarding may have filled is released
    // (headers.p4: a validated scratch header counts in the packet length,
    // which egress reads for INT's tx bytes).
    action transit_port() {
        meta.egress_work = meta.egress_work | EGRESS_INT_TX_BYTES;
        meta.flow.setInvalid();
    }

    // A packet that arrived with INT: egress pushes this hop, or sinks.
    action carries_int() {
        meta.egress_work = meta.egress_work | EGRESS_INT;
    }

    table int_source_port {
        key = {
            std_meta.ingress_port: exact;
        }
        actions = {
            sample_port;
            every_packet;
            sample_port_after_raised_flows;
            transit_port;
            NoAction;
        }
        default_action = NoAction();     // INT off; on: transit_port (make bench: a host's port's action)
        size = PORT_COUNT;
    }

    // Not a raised flow's packet (int_raised_flow's miss): counted at the port's rate.
    action count_unraised() {
        count_at_port(meta.int_sampling.sample_one_in);
    }

    // Not the entry's sample: no INT-MD header after all.
    action entry_unsampled() {
        hdr.int_md.setInvalid();                                      // the rule filled it
    }

    // A raised flow: every packet, with the instructions of the rule that watches it.
    action raised_flow_source(bit<8> max_hop_count, bit<5> hop_metadata_words, bit<16> instruction_bitmap,
                              bit<16> ds_id, bit<16> ds_instruction, bit<16> ds_flags) {
        meta.int_sampling.count = 1;                 // not the port's sample (0 is): no watchlist lookup
        md_from_rule(max_hop_count, hop_metadata_words, instruction_bitmap, ds_id, ds_instruction, ds_flags);
    }

    table int_raised_flow {
        key = {
            hdr.ipv4.src_addr:     exact;
            hdr.ipv4.dst_addr:     exact;
            hdr.ipv4.protocol:     exact;
            meta.flow.l4_src_port: exact @name("meta.l4_src_port");
            meta.flow.l4_dst_port: exact @name("meta.l4_dst_port");
        }
        actions = {
            raised_flow_source;
            @defaultonly count_unraised;
        }
        const default_action = count_unraised();
        size = INT_RAISED_FLOWS;
    }

    action int_source(bit<8> max_hop_count, bit<5> hop_metadata_words, bit<16> instruction_bitmap,
                      bit<16> ds_id, bit<16> ds_instruction, bit<16> ds_flags, bit<32> sample_one_in,
                      int_sampler_t sampler) {
        int_sample_count.read(meta.int_sampling.count, sampler);
        meta.int_sampling.count = SAMPLE_COUNT(meta.int_sampling.count, sample_one_in);
        int_sample_count.write(sampler, meta.int_sampling.count);
        md_from_rule(max_hop_count, hop_metadata_words, instruction_bitmap, ds_id, ds_instruction, ds_flags);
    }

    table int_watchlist {
        key = {
            hdr.int_shim.isValid():  exact;
            std_meta.ingress_port:   ternary;
            hdr.ipv4.src_addr:       ternary;
            hdr.ipv4.dst_addr:       ternary;
            hdr.ipv4.protocol:       ternary;
            meta.flow.l4_src_port:   range @name("meta.l4_src_port");
            meta.flow.l4_dst_port:   range @name("meta.l4_dst_port");
        }
        actions = {
            int_source;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = INT_WATCHLIST_SIZE;
    }


    FlowKey() flow_key;
    IntInsert() insert;

    // headers.p4: a validated scratch header counts in the packet length,
    // which egress reads for INT's tx bytes (invalidating one that is not
    // valid changes nothing).
    action release_flow_key() {
        meta.flow.setInvalid();
    }

    apply {
        switch (int_source_port.apply().action_run) {    // INT off at this switch: NoAction, nothing more
            transit_port: {
                if (hdr.int_shim.isValid()) {
                    carries_int();
                }
            }
            sample_port:
            every_packet:
            sample_port_after_raised_flows: {            // a host's port: INT may start here
                // Not on a packet that carries INT already (counted at a port
                // without raised flows, by sample_port; no lookup).
                if (!hdr.int_shim.isValid()) {
                    if (meta.int_sampling.sample_one_in != 0) {         // raised flows first, not counted
                        if (!meta.flow.isValid()) {      // forwarding or non-minimal routing
                            flow_key.apply(hdr, meta);   // may have filled it
                        }
                        switch (int_raised_flow.apply().action_run) {
                            raised_flow_source: {        // count 1: no watchlist lookup below
                                insert.apply(hdr, meta);
                            }
                        }
                    }
                    if (meta.int_sampling.count == 0) {  // the port's sample: which rule, if any
                        if (!meta.flow.isValid()) {
                            flow_key.apply(hdr, meta);
                        }
                        switch (int_watchlist.apply().action_run) {
                            int_source: {                // and the entry's own rate (1: every packet)
                                if (meta.int_sampling.count == 0) {
                                    insert.apply(hdr, meta);
                                } else {
                                    entry_unsampled();
                                }
                            }
                        }
                    }
                } else {
                    carries_int();
                }
                release_flow_key();
            }
        }
    }
}

#endif
