// Parser and deparser. A parser error (truncated packet, IPv4 options, wrong
// IP version) does not stop the packet here: BMv2 hands it to ingress with
// standard_metadata.parser_error set, where it is counted and dropped.
#ifndef PARSER_P4
#define PARSER_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

parser FabricParser(packet_in packet,
                    out headers_t hdr,
                    inout local_metadata_t meta,
                    inout standard_metadata_t std_meta) {
    state start {
        transition parse_ethernet;
    }

    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            ETHERTYPE_SOURCE_ROUTE: parse_source_route;
            default: accept;
        }
    }

    // An INT probe's port list: this switch's entry, then the others as one
    // block (at most SOURCE_ROUTE_MAX_HOPS entries; an empty list is malformed).
    state parse_source_route {
        packet.extract(hdr.source_route);
        verify(hdr.source_route.hops_left != 0, error.SourceRouteMalformed);
        packet.extract(hdr.source_route_port);
        packet.extract(hdr.source_route_rest, ((bit<32>) hdr.source_route.hops_left - 1) * 16);
        transition parse_ipv4;
    }

    // Validity is checked by the transition's match, not by verify()
    // expressions: BMv2 then reads version and IHL as bytes, with no
    // arithmetic on the good path. Only a first fragment carries the L4 header.
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (4, 5, 0, IP_PROTO_TCP): parse_tcp;
            (4, 5, 0, IP_PROTO_UDP): parse_udp;
            (4, 5, _, _): accept;
            (4, _, _, _): reject_ipv4_options;
            default: reject_ipv4_version;
        }
    }

    state reject_ipv4_options {
        verify(false, error.IPv4OptionsNotSupported);
        transition accept;
    }

    state reject_ipv4_version {
        verify(false, error.IPv4IncorrectVersion);
        transition accept;
    }

    state parse_tcp {
        packet.extract(hdr.tcp);
        meta.l4_src_port = hdr.tcp.src_port;
        meta.l4_dst_port = hdr.tcp.dst_port;
        transition select(hdr.tcp.data_offset, hdr.ipv4.dscp) {
            (5, INT_DSCP): parse_int_shim;
            (5, _): accept;
            (0 &&& 0xC, _): reject_tcp_offset;   // 0..3: shorter than the TCP header
            (4, _): reject_tcp_offset;
            default: parse_tcp_options;
        }
    }

    // TCP options are kept as one opaque block: INT over TCP sits after them.
    state parse_tcp_options {
        packet.extract(hdr.tcp_options, ((bit<32>) hdr.tcp.data_offset - 5) * 32);
        transition select(hdr.ipv4.dscp) {
            INT_DSCP: parse_int_shim;
            default: accept;
        }
    }

    state reject_tcp_offset {
        verify(false, error.HeaderTooShort);
        transition accept;
    }

    state parse_udp {
        packet.extract(hdr.udp);
        meta.l4_src_port = hdr.udp.src_port;
        meta.l4_dst_port = hdr.udp.dst_port;
        transition select(hdr.udp.dst_port) {
            INT_UDP_PORT: parse_int_shim;
            AGG_UDP_PORT_BASE &&& AGG_UDP_PORT_MASK: parse_agg;
            default: accept;
        }
    }

    // Aggregation: a short packet fails here (PacketTooShort with hdr.agg
    // valid), which ingress counts as DROP_AGG_BAD_LENGTH.
    state parse_agg {
        packet.extract(hdr.agg);
        packet.extract(hdr.agg_data);
        transition accept;
    }

    // INT-MD: shim, header, then the metadata stack as 4-byte words. A
    // malformed INT packet stops here with error.IntMalformed (or a
    // PacketTooShort/StackOutOfBounds with the shim valid), which ingress
    // counts as DROP_INT_MALFORMED.
    state parse_int_shim {
        packet.extract(hdr.int_shim);
        verify(hdr.int_shim.int_type == INT_TYPE_MD && hdr.int_shim.len >= INT_HEADER_WORDS,
               error.IntMalformed);
        transition parse_int_md;
    }

    state parse_int_md {
        packet.extract(hdr.int_md);
        verify(hdr.int_md.ver == INT_VERSION, error.IntMalformed);
        meta.telemetry.hop_words = INT_BASELINE_WORDS(hdr.int_md.instruction_bitmap);
        transition select(hdr.int_md.ds_id) {
            FABRIC_DS_ID: parse_int_fabric_ds;
            default: check_int_hop_ml;
        }
    }

    state parse_int_fabric_ds {
        meta.telemetry.hop_words = meta.telemetry.hop_words + INT_FABRIC_DS_WORDS(hdr.int_md.ds_instruction);
        transition check_int_hop_ml;
    }

    // HopML must hold what the bitmaps ask for; the rest of it is all-ones
    // fill (bits 6-14, a domain this switch does not know).
    state check_int_hop_ml {
        verify((bit<8>) hdr.int_md.hop_ml >= meta.telemetry.hop_words, error.IntMalformed);
        meta.telemetry.fill_words = (bit<8>) hdr.int_md.hop_ml - meta.telemetry.hop_words;
        // The stack as one block; longer than INT_MAX_STACK_WORDS: HeaderTooLong.
        packet.extract(hdr.int_stack, ((bit<32>) hdr.int_shim.len - (bit<32>) INT_HEADER_WORDS) * 32);
        transition accept;
    }
}

control FabricDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.source_route);
        packet.emit(hdr.source_route_port);
        packet.emit(hdr.source_route_rest);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.tcp);
        packet.emit(hdr.tcp_options);
        packet.emit(hdr.agg);
        packet.emit(hdr.agg_data);
        packet.emit(hdr.report_group);
        packet.emit(hdr.report_individual);
        packet.emit(hdr.report_main);
        packet.emit(hdr.report_int_md);
        packet.emit(hdr.report_drop_md);
        packet.emit(hdr.inner_ipv4);
        packet.emit(hdr.inner_udp);
        packet.emit(hdr.inner_tcp);
        packet.emit(hdr.inner_tcp_options);
        packet.emit(hdr.int_shim);
        packet.emit(hdr.int_md);
        packet.emit(hdr.int_node_id);
        packet.emit(hdr.int_l1_ports);
        packet.emit(hdr.int_hop_latency);
        packet.emit(hdr.int_queue);
        packet.emit(hdr.int_ingress_ts);
        packet.emit(hdr.int_egress_ts);
        packet.emit(hdr.int_fill16);
        packet.emit(hdr.int_fill8);
        packet.emit(hdr.int_fill4);
        packet.emit(hdr.int_fill2);
        packet.emit(hdr.int_fill1);
        packet.emit(hdr.int_ds_tx_bytes);
        packet.emit(hdr.int_ds_tx_time);
        packet.emit(hdr.int_ds_link_rate);
        packet.emit(hdr.int_checksum_fill);
        packet.emit(hdr.int_stack);
    }
}

#endif
