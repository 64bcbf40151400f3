// Packet headers and the per-packet metadata that controls share.
#ifndef HEADERS_P4
#define HEADERS_P4

#include "defines.p4"

error {
    IPv4IncorrectVersion,
    IPv4OptionsNotSupported
}

header ethernet_t {
    mac_addr_t dst_addr;
    mac_addr_t src_addr;
    bit<16>    ether_type;
}

header ipv4_t {
    bit<4>      version;
    bit<4>      ihl;
    bit<6>      dscp;
    bit<2>      ecn;
    bit<16>     total_len;
    bit<16>     identification;
    bit<3>      flags;
    bit<13>     frag_offset;
    bit<8>      ttl;
    bit<8>      protocol;
    bit<16>     hdr_checksum;
    ipv4_addr_t src_addr;
    ipv4_addr_t dst_addr;
}

header tcp_t {
    bit<16> src_port;
    bit<16> dst_port;
    bit<32> seq_no;
    bit<32> ack_no;
    bit<4>  data_offset;
    bit<4>  reserved;
    bit<8>  flags;
    bit<16> window;
    bit<16> checksum;
    bit<16> urgent_ptr;
}

header udp_t {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

struct headers_t {
    ethernet_t ethernet;
    ipv4_t     ipv4;
    tcp_t      tcp;
    udp_t      udp;
}

struct local_metadata_t {
    // L4 ports of TCP/UDP packets, 0 otherwise: part of the ECMP 5-tuple.
    bit<16>       l4_src_port;
    bit<16>       l4_dst_port;
    next_id_t     next_id;
    ecmp_slot_t   ecmp_slot;     // slot of the flow in its ECMP group (5-tuple hash, switch seed)
    drop_reason_t drop_reason;
}

#endif
