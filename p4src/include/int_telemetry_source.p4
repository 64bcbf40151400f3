// INT source (INT v2.1, INT-MD): the first-hop switch inserts the INT shim
// and INT-MD header into the packets of watchlisted flows; its egress then
// pushes its own metadata like every transit hop (int_telemetry_egress.p4).
//
// int_watchlist matches the 5-tuple (ternary addresses and protocol, L4 port
// ranges) and the ingress port, so the controller selects flows where they
// enter the fabric. An entry gives the instruction bitmap, HopML (checked by
// the controller against the bitmap), the hop budget and a sampling rate:
// one packet in sample_one_in, counted, not drawn: the entry's sampler, a
// cell of int_sample_count, counts the packets it matched since its last
// sampled one, and the N-th is sampled (exactly 1 in N over any N packets).
// The controller gives each entry its own sampler, so a port's or a flow's
// rate is its own; an every-packet entry (N = 1) may share sampler 0, whose
// count stays 0. Raising a port or a flow to every packet
// (telemetry/adaptive_sampling.py) is a modify of N, or an entry of its own
// ahead of the rules. Packets that already carry INT never match (the key
// includes the shim's validity). The watchlist is looked up only where
// int_switch says INT is on.
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

control IntSource(inout headers_t hdr,
                  inout local_metadata_t meta,
                  in standard_metadata_t std_meta) {
    // Packets each watchlist entry matched since its last sampled one (the
    // ingress pipeline is one thread in simple_switch: read and write in two
    // actions do not race).
    register<bit<32>, int_sampler_t>(INT_WATCHLIST_SIZE) int_sample_count;

    action count_unsampled() {
        int_sample_count.write(meta.int_scratch.sampler, meta.int_scratch.sample);
    }

    action count_sampled() {
        int_sample_count.write(meta.int_scratch.sampler, 0);
    }

    action int_source(bit<8> max_hop_count, bit<5> hop_metadata_words, bit<16> instruction_bitmap,
                      bit<16> ds_id, bit<16> ds_instruction, bit<16> ds_flags, bit<32> sample_one_in,
                      int_sampler_t sampler) {
        meta.int_scratch.setValid();
        meta.int_scratch.sampler = sampler;
        meta.int_scratch.sample_one_in = sample_one_in;
        int_sample_count.read(meta.int_scratch.sample, sampler);
        meta.int_scratch.sample = meta.int_scratch.sample + 1;     // this packet counted
        meta.int_scratch.max_hops = max_hop_count;
        meta.int_scratch.hop_ml = hop_metadata_words;
        meta.int_scratch.instructions = instruction_bitmap;
        meta.int_scratch.domain = ds_id;
        meta.int_scratch.domain_instructions = ds_instruction;
        meta.int_scratch.domain_flags = ds_flags;
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

    action insert_int_headers() {
        hdr.int_shim.setValid();
        hdr.int_shim.int_type = INT_TYPE_MD;
        hdr.int_shim.rsvd = 0;
        hdr.int_shim.len = INT_HEADER_WORDS;
        hdr.int_md.setValid();
        hdr.int_md.ver = INT_VERSION;
        hdr.int_md.d = 0;
        hdr.int_md.e = 0;
        hdr.int_md.m = 0;
        hdr.int_md.rsvd = 0;
        hdr.int_md.hop_ml = meta.int_scratch.hop_ml;
        hdr.int_md.remaining_hop_cnt = meta.int_scratch.max_hops;
        hdr.int_md.instruction_bitmap = meta.int_scratch.instructions;
        hdr.int_md.ds_id = meta.int_scratch.domain;
        hdr.int_md.ds_instruction = meta.int_scratch.domain_instructions;
        hdr.int_md.ds_flags = meta.int_scratch.domain_flags;
        hdr.ipv4.total_len = hdr.ipv4.total_len + INT_SHIM_AND_HEADER_BYTES;
        meta.telemetry.l4_checksum = 1;
    }

    // INT on at this switch: the controller sets int_switch's default action
    // to enable_int. Off, a packet costs one keyless table (no key to look
    // up): the watchlist's seven-field key is not even built.
    action enable_int() {
        meta.egress_work = meta.egress_work | EGRESS_INT;
    }

    table int_switch {
        key = { }
        actions = {
            enable_int;
            NoAction;
        }
        default_action = NoAction();
        size = 1;
    }

    action flow_key() {
        FLOW_KEY(hdr, meta)
    }

    // headers.p4: a validated scratch header counts in the packet length,
    // which egress reads for INT's tx bytes.
    action release_flow_key() {
        meta.flow.setInvalid();
    }

    apply {
        switch (int_switch.apply().action_run) {
            enable_int: {
                if (!meta.flow.isValid()) {              // the watchlist's L4 ports; forwarding or
                    flow_key();                          // non-minimal routing may have filled it
                }
                switch (int_watchlist.apply().action_run) {
                    int_source: {
                        if (meta.int_scratch.sample < meta.int_scratch.sample_one_in) {
                            count_unsampled();
                        } else {
                            count_sampled();
                            // TCP and UDP only (the watchlist's protocols): the shim follows the L4 header.
                            if (hdr.udp.isValid()) {
                                insert_int_headers();
                                hdr.int_shim.npt = INT_NPT_UDP_PORT;
                                hdr.int_shim.npt_field = hdr.udp.dst_port;
                                hdr.udp.dst_port = INT_UDP_PORT;
                                hdr.udp.length = hdr.udp.length + INT_SHIM_AND_HEADER_BYTES;
                            } else if (hdr.tcp.isValid()) {
                                insert_int_headers();
                                hdr.int_shim.npt = INT_NPT_DSCP;
                                hdr.int_shim.npt_field = (bit<16>) (hdr.ipv4.dscp ++ 2w0);
                                hdr.ipv4.dscp = INT_DSCP;
                            }
                        }
                        meta.int_scratch.setInvalid();   // headers.p4: out of the packet length
                    }
                }
                release_flow_key();
            }
        }
    }
}

#endif
