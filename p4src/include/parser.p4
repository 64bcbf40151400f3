// Parser and deparser. A malformed packet does not stop here: ingress
// counts and drops it. The parser's own checks end in a reject_* state that
// names the drop reason (meta.drop_reason), makes IPv4 invalid so that no
// forwarding path takes the packet, and accepts; BMv2's own errors
// (PacketTooShort, StackOutOfBounds) reach ingress in
// standard_metadata.parser_error. Not verify(): BMv2 raises a failed
// verify() as a C++ exception, 27k instructions, a fifth of what forwarding
// a packet costs (callgrind; a write to parser_error is lost, simple_switch
// sets it from the exception after the parser ran).
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
            ETHERTYPE_VLAN: parse_vlan;
            ETHERTYPE_SOURCE_ROUTE: parse_source_route;
#ifndef WITHOUT_NONMINIMAL_ROUTING
            ETHERTYPE_VALIANT: parse_valiant;
#endif
#ifndef WITHOUT_LOSSLESS
            ETHERTYPE_MAC_CONTROL: parse_mac_control;
#endif
            default: accept;
        }
    }

    // A tagged frame (one tag; IPv4 inside, or ingress drops it as not IPv4).
    state parse_vlan {
        packet.extract(hdr.vlan);
        transition select(hdr.vlan.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }
#ifndef WITHOUT_NONMINIMAL_ROUTING

    // A Valiant tag (IPv4 inside, or ingress drops it as not IPv4).
    state parse_valiant {
        packet.extract(hdr.valiant);
        transition select(hdr.valiant.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }
#endif
#ifndef WITHOUT_LOSSLESS

    // MAC control: only PFC, whole (padded to the minimum frame); anything
    // else, or a runt, is an error ingress counts as DROP_PFC_MALFORMED.
    // (Extracted before the opcode is checked: a lookahead would cost a
    // metadata temporary for every packet.)
    state parse_mac_control {
        packet.extract(hdr.pfc);
        transition select(hdr.pfc.opcode) {
            PFC_OPCODE: accept;
            default: reject_mac_control;
        }
    }

    state reject_mac_control {
        meta.drop_reason = DROP_PFC_MALFORMED;
        transition accept;
    }
#endif

    // An INT probe's port list: this switch's entry, then the others as one
    // block (at most SOURCE_ROUTE_MAX_HOPS entries; an empty list is malformed).
    // Checks are select()s into a reject state rather than verify(), and a
    // computed length or select key is computed in the state before the one
    // that uses it: p4c gives every verify() condition, and every expression
    // it finds in an extract's length or a select key (it propagates an
    // assignment within a state), a metadata field of its own, which BMv2
    // zeroes for every packet. meta.parse carries them (one header: one reset).
    state parse_source_route {
        packet.extract(hdr.source_route);
        meta.parse.setValid();
        meta.parse.length = ((bit<32>) hdr.source_route.hops_left - 1) * 16;
        transition select(hdr.source_route.hops_left) {
            0: reject_source_route;
            default: parse_source_route_ports;
        }
    }

    state parse_source_route_ports {
        packet.extract(hdr.source_route_port);
        packet.extract(hdr.source_route_rest, meta.parse.length);
        meta.parse.setInvalid();
        transition parse_ipv4;
    }

    state reject_source_route {
        meta.drop_reason = DROP_PARSER_ERROR;
        transition accept;
    }

    // Validity is checked by the transition's match, not by verify()
    // expressions: BMv2 then reads version and IHL as bytes, with no
    // arithmetic on the good path. Only a first fragment carries the L4 header.
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.version_ihl, hdr.ipv4.id_flags_frag, hdr.ipv4.protocol) {
            (IPV4_VERSION_IHL, 0 &&& IPV4_FRAG_OFFSET_MASK, IP_PROTO_TCP): parse_tcp;
            (IPV4_VERSION_IHL, 0 &&& IPV4_FRAG_OFFSET_MASK, IP_PROTO_UDP): parse_udp;
            (IPV4_VERSION_IHL, _, _): accept;
            (0x40 &&& 0xF0, _, _): reject_ipv4_options;      // version 4, IHL not 5
            default: reject_ipv4_version;
        }
    }

    state reject_ipv4_options {
        meta.drop_reason = DROP_PARSER_ERROR;
        hdr.ipv4.setInvalid();
        transition accept;
    }

    state reject_ipv4_version {
        meta.drop_reason = DROP_PARSER_ERROR;
        hdr.ipv4.setInvalid();
        transition accept;
    }

    state parse_tcp {
        packet.extract(hdr.tcp);
        transition select(hdr.tcp.data_offset, hdr.ipv4.dscp) {
#ifndef WITHOUT_INT_TELEMETRY
            (5, INT_DSCP): parse_int_shim;
#endif
            (5, _): accept;
            (0 &&& 0xC, _): reject_tcp_offset;   // 0..3: shorter than the TCP header
            (4, _): reject_tcp_offset;
            default: parse_tcp_options;
        }
    }

    // TCP options are kept as one opaque block: INT over TCP sits after them.
    state parse_tcp_options {
        meta.parse.setValid();
        meta.parse.length = ((bit<32>) hdr.tcp.data_offset - 5) * 32;
        transition select(hdr.ipv4.dscp) {
#ifndef WITHOUT_INT_TELEMETRY
            INT_DSCP: extract_tcp_options_then_int;
#endif
            default: extract_tcp_options;
        }
    }

    state extract_tcp_options {
        packet.extract(hdr.tcp_options, meta.parse.length);
        meta.parse.setInvalid();
        transition accept;
    }

#ifndef WITHOUT_INT_TELEMETRY
    state extract_tcp_options_then_int {
        packet.extract(hdr.tcp_options, meta.parse.length);
        meta.parse.setInvalid();
        transition parse_int_shim;
    }
#endif

    state reject_tcp_offset {
        meta.drop_reason = DROP_PARSER_ERROR;
        hdr.ipv4.setInvalid();
        transition accept;
    }

    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
#ifndef WITHOUT_INT_TELEMETRY
            INT_UDP_PORT: parse_int_shim;
#endif
#ifndef WITHOUT_AGGREGATION
            AGG_UDP_PORT_BASE &&& AGG_UDP_PORT_MASK: parse_agg;
#endif
            default: accept;
        }
    }
#ifndef WITHOUT_AGGREGATION

    // Aggregation: the header and the block's first chunk (a shorter packet
    // fails here: PacketTooShort to an aggregation port, which ingress counts
    // as DROP_AGG_BAD_LENGTH), and a full block's other chunks. Other lengths
    // are the aggregating switch's to judge (a server's result may be 532
    // bytes: 64 int64).
    state parse_agg {
        packet.extract(hdr.agg);
        transition select(hdr.udp.length) {
            AGG_UDP_LENGTH_FULL: parse_agg_rest;
            default: accept;
        }
    }
    state parse_agg_rest {
        packet.extract(hdr.agg_rest);
        transition accept;
    }
#endif
#ifndef WITHOUT_INT_TELEMETRY

    // INT-MD: shim, header, then the metadata stack as 4-byte words. A
    // malformed INT packet stops here in reject_int (DROP_INT_MALFORMED), or
    // with a PacketTooShort/StackOutOfBounds with the shim valid, which
    // ingress counts as DROP_INT_MALFORMED too.
    state parse_int_shim {
        packet.extract(hdr.int_shim);
        transition select(hdr.int_shim.int_type, hdr.int_shim.len) {   // INT-MD, at least its header
            (INT_TYPE_MD, 0 &&& 0xFE): reject_int;                     // 0, 1
            (INT_TYPE_MD, 2): reject_int;
            (INT_TYPE_MD, _): parse_int_md;
            default: reject_int;
        }
    }

    // HopML must hold what the bitmaps ask for; the rest of it is all-ones
    // fill (bits 6-14, a domain this switch does not know). HopML has 5 bits
    // and the bitmaps ask for at most 12 words, so a HopML too small wraps
    // fill_words above 31 (check_int_fill).
    state parse_int_md {
        packet.extract(hdr.int_md);
        meta.parse.setValid();
        meta.parse.int_words = INT_BASELINE_WORDS(hdr.int_md.instruction_bitmap);
        meta.parse.int_fill = (bit<8>) hdr.int_md.hop_ml - meta.parse.int_words;
        meta.parse.length = ((bit<32>) hdr.int_shim.len - (bit<32>) INT_HEADER_WORDS) * 32;
        transition select(hdr.int_md.ver, hdr.int_md.ds_id) {
            (INT_VERSION, FABRIC_DS_ID): parse_int_fabric_ds;
            (INT_VERSION, _): check_int_fill;
            default: reject_int;
        }
    }

    state reject_int {
        meta.drop_reason = DROP_INT_MALFORMED;
        hdr.ipv4.setInvalid();
        transition accept;
    }

    state parse_int_fabric_ds {
        meta.parse.int_words = meta.parse.int_words + INT_FABRIC_DS_WORDS(hdr.int_md.ds_instruction);
        meta.parse.int_fill = (bit<8>) hdr.int_md.hop_ml - meta.parse.int_words;
        transition check_int_fill;
    }

    state check_int_fill {
        transition select(meta.parse.int_fill) {
            0 &&& 0xE0: parse_int_stack;
            default: reject_int;
        }
    }

    // The stack as one block; longer than INT_MAX_STACK_WORDS: HeaderTooLong.
    state parse_int_stack {
        packet.extract(hdr.int_stack, meta.parse.length);
        meta.parse.setInvalid();
        transition accept;
    }
#endif
}

control FabricDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.vlan);
#ifndef WITHOUT_LOSSLESS
        packet.emit(hdr.pfc);
#endif
#ifndef WITHOUT_NONMINIMAL_ROUTING
        packet.emit(hdr.valiant);
#endif
        packet.emit(hdr.source_route);
        packet.emit(hdr.source_route_port);
        packet.emit(hdr.source_route_rest);
        packet.emit(hdr.ipv4);
#ifndef WITHOUT_INT_TELEMETRY
        packet.emit(hdr.report);            // a telemetry report: ipv4 is its outer header, this its UDP and
                                            // report headers; the reported packet starts at inner_ipv4
        packet.emit(hdr.report_int_md);
        packet.emit(hdr.report_drop_md);
        packet.emit(hdr.inner_ipv4);
#endif
        packet.emit(hdr.udp);
        packet.emit(hdr.tcp);
        packet.emit(hdr.tcp_options);
#ifndef WITHOUT_AGGREGATION
        packet.emit(hdr.agg);
        packet.emit(hdr.agg_rest);
#endif
#ifndef WITHOUT_INT_TELEMETRY
        packet.emit(hdr.int_shim);
        packet.emit(hdr.int_md);
        packet.emit(hdr.int_hop16);
        packet.emit(hdr.int_hop8);
        packet.emit(hdr.int_hop4);
        packet.emit(hdr.int_hop2);
        packet.emit(hdr.int_hop1);
        packet.emit(hdr.int_stack);
#endif
    }
}

#endif
