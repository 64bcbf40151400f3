// INT v2.1 (INT-MD over TCP/UDP) and Telemetry Report v2.0 headers. Field
// layouts follow the specs' figures; docs/protocols/int_telemetry.md is the wire contract and
// wire/int_telemetry.py the same layouts as Scapy layers.
#ifndef INT_HEADERS_P4
#define INT_HEADERS_P4

#include "defines.p4"

// Words of one hop's metadata for the bits this switch provides (bitmap bit
// 0 = MSB): node id 1, L1 ports 1, hop latency 1, queue 1, ingress and egress
// timestamps 2 each, checksum complement (bit 15) 1; and FABRIC_DS_ID's DS
// bits 0-2, one word each. Bits 6-14 are filled with all-ones words.
#define INT_BASELINE_WORDS(b) ((bit<8>) b[15:15] + (bit<8>) b[14:14] + (bit<8>) b[13:13] \
    + (bit<8>) b[12:12] + ((bit<8>) b[11:11] << 1) + ((bit<8>) b[10:10] << 1) + (bit<8>) b[0:0])
#define INT_FABRIC_DS_WORDS(b) ((bit<8>) b[15:15] + (bit<8>) b[14:14] + (bit<8>) b[13:13])

// TCP options (at most 40 bytes): the INT shim follows them.
header tcp_options_t {
    varbit<320> options;
}

// Shim: Type | NPT | rsvd | Length (words of INT-MD header + stack) | 16 bits:
// NPT 0: rsvd(8) original DSCP(6) rsvd(2); NPT 1: the original UDP dport.
header int_shim_t {
    bit<4>  int_type;
    bit<2>  npt;
    bit<2>  rsvd;
    bit<8>  len;
    bit<16> npt_field;
}

header int_md_t {
    bit<4>  ver;
    bit<1>  d;          // discard: the sink drops the packet after reporting
    bit<1>  e;          // max hop count exceeded
    bit<1>  m;          // MTU exceeded
    bit<12> rsvd;
    bit<5>  hop_ml;     // words each hop pushes
    bit<8>  remaining_hop_cnt;
    bit<16> instruction_bitmap;
    bit<16> ds_id;
    bit<16> ds_instruction;
    bit<16> ds_flags;
}

// The metadata stack as received: one variable-length header (BMv2 resets
// every header of the PHV for every packet, so one header here, not one
// per word, keeps the pipeline cheap for packets without INT).
header int_stack_t {
    varbit<INT_STACK_BITS> words;
}

// The metadata this switch pushes: HopML words (at most 31) in bitmap order,
// built in meta.int_scratch.hop and cut into headers of 16, 8, 4, 2 and 1
// words by HopML's bits (int_telemetry_egress.p4 IntHopWords; the default
// instructions, alone or with the fabric domain's three words, go into the
// 8-, 2- and 1-word headers directly): five header instances, not one per
// instruction bit, because BMv2 marks every header instance invalid for
// every packet, INT or not.
header int_hop16_t { bit<512> words; }
header int_hop8_t  { bit<256> words; }
header int_hop4_t  { bit<128> words; }
header int_hop2_t  { bit<64>  words; }
header int_hop1_t  { bit<32>  words; }

// Never emitted (headers.p4): the reporting switch's measurements and the
// IPv4/L4 fields it rewrote, as received, for an INT report clone; the INT
// headers it received too (fields here, not headers of their own: BMv2
// marks every header instance invalid for every packet).
header int_report_saved_t {
    bit<1>  congested;
    bit<1>  intermediate;
    bit<6>  ipv4_dscp;
    bit<1>  has_stack;         // the packet had a stack (not the first hop's): int_stack below
    bit<7>  pad;               // BMv2: whole bytes
    bit<16> ingress_port;
    bit<16> egress_port;
    bit<32> hop_latency;
    bit<24> queue_occupancy;
    bit<64> ingress_ts;
    bit<64> egress_ts;
    bit<32> tx_bytes;
    bit<32> link_rate_mbps;
    bit<16> ipv4_total_len;
    bit<16> ipv4_checksum;
    bit<16> l4_dst_port;
    bit<16> udp_length;
    bit<16> l4_checksum;
    bit<16> inner_bytes;       // the reported packet: IPv4 + L4 + INT bytes
    bit<32> int_shim;          // its INT shim and MD header, field after field,
    bit<96> int_md;
    varbit<INT_STACK_BITS> int_stack;   // and its stack
}

// A telemetry report after its outer IPv4 header: the UDP header to the
// collector, then Telemetry Report v2.0's group header, one individual report
// header and its INT main contents, as one header (BMv2 marks every header
// instance invalid for every packet, reports or not); wire/int_telemetry.py
// has the report as the spec's three layers. The reporting switch's metadata
// follows.
header report_t {
    bit<16> udp_src_port;   // UDP
    bit<16> udp_dst_port;
    bit<16> udp_length;
    bit<16> udp_checksum;
    bit<4>  ver;            // group header
    bit<6>  hw_id;
    bit<22> seq_no;
    bit<32> node_id;
    bit<4>  rep_type;       // individual report header
    bit<4>  in_type;
    bit<8>  report_length;  // words after this header's first word
    bit<8>  md_length;      // words of metadata
    bit<1>  d;              // dropped
    bit<1>  q;              // congested queue
    bit<1>  f;              // tracked flow
    bit<1>  i;              // intermediate (not the sink)
    bit<4>  rsvd;
    bit<16> rep_md_bits;    // main contents
    bit<16> ds_id;
    bit<16> ds_md_bits;
    bit<16> ds_md_status;
}

// The metadata of an INT report (int_telemetry_egress.p4): RepMdBits 1-5, then
// FABRIC_DS_ID bits 0-2.
header report_int_md_t {
    bit<16> ingress_port;
    bit<16> egress_port;
    bit<32> hop_latency;
    bit<8>  queue_id;
    bit<24> queue_occupancy;
    bit<64> ingress_ts;
    bit<64> egress_ts;
    bit<32> tx_bytes;
    bit<32> tx_time;
    bit<32> link_rate_mbps;
}

// The metadata of a drop report: RepMdBits 1 (L1 ports), 4 (ingress
// timestamp), 15 (queue id, drop reason, padding).
header report_drop_md_t {
    bit<16> ingress_port;
    bit<16> egress_port;
    bit<64> ingress_ts;
    bit<8>  queue_id;
    bit<8>  drop_reason;
    bit<16> pad;
}

#endif
