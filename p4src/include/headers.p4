// Packet headers and the per-packet metadata that controls share.
#ifndef HEADERS_P4
#define HEADERS_P4

#include "defines.p4"
#include "int_headers.p4"

error {
    IPv4IncorrectVersion,
    IPv4OptionsNotSupported,
    IntMalformed
}

header ethernet_t {
    mac_addr_t dst_addr;
    mac_addr_t src_addr;
    bit<16>    ether_type;
}

// One hop of a source-routed INT probe: the egress port at this switch;
// bos marks the last entry (an IPv4 packet follows it).
header source_route_t {
    bit<1>  bos;
    bit<15> port;
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

// Deparsed in this order (parser.p4). A data packet is ethernet, ipv4, one
// L4 header, INT (shim, MD header, this hop, the stack it arrived with). A
// telemetry report reuses ethernet/ipv4/udp as its outer headers, then the
// report headers, then the reported packet from inner_ipv4 on.
struct headers_t {
    ethernet_t          ethernet;
    source_route_t[SOURCE_ROUTE_MAX_HOPS] source_route;
    ipv4_t              ipv4;
    udp_t               udp;
    tcp_t               tcp;
    tcp_options_t       tcp_options;
    // Telemetry report (report clones only)
    report_group_t      report_group;
    report_individual_t report_individual;
    report_main_t       report_main;
    int_l1_ports_t      report_l1_ports;
    int_hop_latency_t   report_hop_latency;
    int_queue_t         report_queue;
    int_timestamp_t     report_ingress_ts;
    int_timestamp_t     report_egress_ts;
    report_drop_t       report_drop;
    int_word_t          report_ds_tx_bytes;
    int_word_t          report_ds_tx_time;
    int_word_t          report_ds_link_rate;
    ipv4_t              inner_ipv4;
    udp_t               inner_udp;
    tcp_t               inner_tcp;
    tcp_options_t       inner_tcp_options;
    // INT
    int_shim_t          int_shim;
    int_md_t            int_md;
    int_node_id_t       int_node_id;        // this hop's metadata, in bitmap order
    int_l1_ports_t      int_l1_ports;
    int_hop_latency_t   int_hop_latency;
    int_queue_t         int_queue;
    int_timestamp_t     int_ingress_ts;
    int_timestamp_t     int_egress_ts;
    int_word_t[INT_MAX_FILL_WORDS] int_fill; // all-ones: bits 6-14, unknown DS metadata
    int_word_t          int_ds_tx_bytes;
    int_word_t          int_ds_tx_time;
    int_word_t          int_ds_link_rate;
    int_word_t          int_checksum_fill;  // bit 15 last (all-ones: the L4 checksum is recomputed)
    int_word_t[INT_MAX_STACK_WORDS] int_stack;
}

// What a report clone keeps from the packet it reports (clone_preserving_field_list):
// the switch's own measurements and the INT headers as they arrived.
struct int_report_meta_t {
    @field_list(INT_REPORT_FIELDS) bit<1>   congested;
    @field_list(INT_REPORT_FIELDS) bit<1>   intermediate;
    @field_list(INT_REPORT_FIELDS) bit<8>   drop_reason;
    @field_list(INT_REPORT_FIELDS) bit<16>  ingress_port;
    @field_list(INT_REPORT_FIELDS) bit<16>  egress_port;
    @field_list(INT_REPORT_FIELDS) bit<32>  hop_latency;
    @field_list(INT_REPORT_FIELDS) bit<24>  queue_occupancy;
    @field_list(INT_REPORT_FIELDS) bit<64>  ingress_ts;
    @field_list(INT_REPORT_FIELDS) bit<64>  egress_ts;
    @field_list(INT_REPORT_FIELDS) bit<32>  tx_bytes;
    @field_list(INT_REPORT_FIELDS) bit<32>  link_rate_mbps;
    // the IPv4/L4 fields the sink rewrote, as received
    @field_list(INT_REPORT_FIELDS) bit<16>  ipv4_total_len;
    @field_list(INT_REPORT_FIELDS) bit<6>   ipv4_dscp;
    @field_list(INT_REPORT_FIELDS) bit<16>  ipv4_checksum;
    @field_list(INT_REPORT_FIELDS) bit<16>  l4_dst_port;
    @field_list(INT_REPORT_FIELDS) bit<16>  udp_length;
    @field_list(INT_REPORT_FIELDS) bit<16>  l4_checksum;
    @field_list(INT_REPORT_FIELDS) bit<32>  shim;
    @field_list(INT_REPORT_FIELDS) bit<96>  md_header;
    @field_list(INT_REPORT_FIELDS) bit<256> stack0;   // stack words 8k..8k+7 (int_egress.p4)
    @field_list(INT_REPORT_FIELDS) bit<256> stack1;
    @field_list(INT_REPORT_FIELDS) bit<256> stack2;
    @field_list(INT_REPORT_FIELDS) bit<256> stack3;
    @field_list(INT_REPORT_FIELDS) bit<256> stack4;
    @field_list(INT_REPORT_FIELDS) bit<256> stack5;
    @field_list(INT_REPORT_FIELDS) bit<256> stack6;
    @field_list(INT_REPORT_FIELDS) bit<256> stack7;
    @field_list(INT_REPORT_FIELDS) bit<16>  inner_bytes;     // reported packet: IPv4 + L4 + INT bytes
}

struct int_meta_t {
    bit<8>  words_left;       // parser: stack words still to extract
    bit<8>  hop_words;        // words this switch's metadata needs (bitmap bits it knows)
    bit<8>  fill_words;       // all-ones words to reach HopML
    bool    l4_checksum;      // INT bytes inserted or removed: recompute the TCP/UDP checksum
    bit<16> l4_length;        // TCP/UDP length for the pseudo-header
    bit<32> sample;
    bit<32> flow_slot;        // suppression state cell of the flow
    bool    flow_changed;     // this hop's (ports, latency bucket, queue bucket) differ from last time
}

struct local_metadata_t {
    // L4 ports of TCP/UDP packets, 0 otherwise: part of the ECMP 5-tuple.
    bit<16>       l4_src_port;
    bit<16>       l4_dst_port;
    next_id_t     next_id;
    ecmp_slot_t   ecmp_slot;     // slot of the flow in its ECMP group (5-tuple hash, switch seed)
    drop_reason_t drop_reason;
    int_meta_t    telemetry;
    int_report_meta_t report;  // kept by report clones
}

#endif
