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
            default: accept;
        }
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
        transition accept;
    }

    state parse_udp {
        packet.extract(hdr.udp);
        meta.l4_src_port = hdr.udp.src_port;
        meta.l4_dst_port = hdr.udp.dst_port;
        transition accept;
    }
}

control FabricDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.tcp);
        packet.emit(hdr.udp);
    }
}

#endif
