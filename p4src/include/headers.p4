// Packet headers and the per-packet metadata that controls share.
#ifndef HEADERS_P4
#define HEADERS_P4

#include "defines.p4"
#include "int_telemetry_headers.p4"

header ethernet_t {
    mac_addr_t dst_addr;
    mac_addr_t src_addr;
    bit<16>    ether_type;
}

// An IEEE 802.1Q tag. The fabric's ports are routed: a tag ends at the
// switch it enters (main.p4), after its PCP gave the packet its traffic
// class there (lossless.p4, pcp_to_dscp).
header vlan_t {
    bit<3>  pcp;
    bit<1>  dei;
    bit<12> vid;
    bit<16> ether_type;
}

// A PFC frame (IEEE 802.1Qbb) after its Ethernet header: MAC control
// opcode, class-enable vector (the upper byte reserved), a pause time per
// class in quanta of 512 bit times, padding to the 60-byte minimum frame.
header pfc_t {
    bit<16>  opcode;
    bit<8>   reserved;
    bit<8>   class_enable;
    bit<16>  time0;
    bit<16>  time1;
    bit<16>  time2;
    bit<16>  time3;
    bit<16>  time4;
    bit<16>  time5;
    bit<16>  time6;
    bit<16>  time7;
    bit<208> pad;
}

// A source-routed INT probe's port list: how many entries are left, this
// switch's egress port, the others (popped one per hop); IPv4 follows.
header source_route_t {
    bit<8> hops_left;
    bit<8> rsvd;
}

header source_route_port_t {
    bit<16> port;
}

header source_route_rest_t {
    varbit<SOURCE_ROUTE_REST_BITS> ports;
}

// A Valiant tag (nonminimal_routing.p4): the intermediate a packet goes to
// first, a Dragonfly group or a switch, numbered by the controller. Its
// source router pushes it; the first switch of the intermediate removes it.
header valiant_t {
    bit<16> target;
    bit<16> ether_type;
}

// Fields the fabric never sets or reads apart are one field each (the same
// bits on the wire): BMv2 extracts, checksums and deparses a header field by
// field, about 360 instructions a field for every IPv4 packet.
header ipv4_t {
    bit<8>      version_ihl;     // version (4 bits) ++ IHL (4): IPV4_VERSION_IHL, IPV4_IHL()
    bit<6>      dscp;
    bit<2>      ecn;
    bit<16>     total_len;
    bit<32>     id_flags_frag;   // identification (16) ++ flags (3) ++ fragment offset (13)
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

#include "aggregation_lanes.p4"

// In-network aggregation (aggregation.p4, docs/protocols/aggregation.md), after UDP:
// the header and the block's first chunk; a full block's other chunks are agg_rest_t.
header agg_t {
    bit<8>  flags;        // AGG_FLAG_*
    bit<8>  job;
    bit<8>  worker;       // written by the switch from agg_worker (what the sender says is ignored)
    bit<8>  exponent;     // block exponent + 128; results carry the maximum
    bit<16> slot;         // AGG_SLOT_SET | slot in the job's range
    bit<16> offset;       // WIDE: the index in the block of the first element carried; else 0
    bit<32> seq;          // the job's block sequence number
    AGG_HEAD_WORDS
}

// Deparsed in this order (parser.p4). A data packet is ethernet, ipv4, one
// L4 header, INT (shim, MD header, this hop, the stack it arrived with). A
// telemetry report reuses ethernet/ipv4 as its outer headers, then its own
// UDP and report headers (report), then the reported packet: a copy of its IPv4
// header (inner_ipv4), and its own L4 header, TCP options and INT headers,
// restored as received (one header instance each, not a copy of each).
struct headers_t {
    ethernet_t          ethernet;
    vlan_t              vlan;
#ifndef WITHOUT_LOSSLESS
    pfc_t               pfc;
#endif
#ifndef WITHOUT_NONMINIMAL_ROUTING
    valiant_t           valiant;
#endif
    source_route_t      source_route;
    source_route_port_t source_route_port;
    source_route_rest_t source_route_rest;
    ipv4_t              ipv4;
    udp_t               udp;
    tcp_t               tcp;
    tcp_options_t       tcp_options;
#ifndef WITHOUT_AGGREGATION
    agg_t               agg;
    agg_rest_t          agg_rest;
#endif
#ifndef WITHOUT_INT_TELEMETRY
    // Telemetry report (report clones only)
    report_t            report;             // UDP and the report's headers
    report_int_md_t     report_int_md;
    report_drop_md_t    report_drop_md;
    ipv4_t              inner_ipv4;
    // INT
    int_shim_t          int_shim;
    int_md_t            int_md;
    int_hop16_t         int_hop16;          // this hop's metadata, HopML words (IntHopWords)
    int_hop8_t          int_hop8;
    int_hop4_t          int_hop4;
    int_hop2_t          int_hop2;
    int_hop1_t          int_hop1;
    int_stack_t         int_stack;
    // Never emitted: what the sink (or a congested hop) keeps for its report
    // clone, which inherits valid headers (BMv2 copies them into E2E clones)
    // while the data packet leaves without them.
    int_report_saved_t  int_saved;
#endif
}

// ---- Per-packet state, and what it costs on BMv2 ----
// BMv2 zeroes every field of the metadata struct for every packet, one
// bignum assignment each (about 650 instructions on the fast build), whether
// a feature uses it or not; a header it only marks invalid (one assignment).
// So local_metadata_t holds only what every packet may read or a clone must
// keep. Everything else a feature computes lives in its scratch header below
// (nested in the metadata, never emitted): the feature validates it when it
// runs and writes each field before reading it. A feature that is off costs
// one assignment per packet for its scratch header, not one per field.
// Validating one costs an assignment per field (BMv2 zeroes it), and BMv2
// adds its size to the packet length that egress sees as
// standard_metadata.packet_length (INT's tx bytes): a scratch header
// validated in ingress or the parser is invalidated again when its feature
// is done with it (which subtracts it).

// The 5-tuple, for hashing and for the tables keyed on a flow (central_route,
// int_watchlist). A hash over a header reads its fields in place; a hash
// over a list { ... } costs a metadata temporary per element. FlowKey
// (flow_key.p4) fills it, before the hash; the L4 ports are the TCP or UDP
// header's, 0 for other protocols. The parser copied the ports into two
// metadata fields for every packet before, which a dropped packet paid for
// too (docs/benchmark.md, "What a dropped packet costs").
//
// In ingress the key is filled once: by forwarding for a group's packet
// (ECMP), else by the first control after it that needs one (non-minimal
// routing, INT's watchlist: `if (!meta.flow.isValid())`). IntSource
// releases it, because INT's egress reads the packet length (its tx bytes);
// where INT is off at the switch (or for an aggregation packet, which INT
// skips) it may reach egress valid, where then nothing reads the length.
// INT's egress fills its own (released in ingress).
header flow_key_t {
    ipv4_addr_t src_addr;
    ipv4_addr_t dst_addr;
    bit<8>      protocol;
    bit<16>     l4_src_port;
    bit<16>     l4_dst_port;
}

header parse_scratch_t {        // parser.p4: the length of a variable-length header,
    bit<32> length;              // and the INT metadata words the bitmaps ask for and the
    bit<8>  int_words;           // all-ones fill up to HopML (checked; egress recounts them)
    bit<8>  int_fill;
}

header ecmp_scratch_t {          // forwarding.p4: ECMP hash of a group's packet
    bit<32> mixed;               // the flow's hash, then times the switch's seed
}

header lb_scratch_t {            // load_balancing.p4
    bit<32>     gap_us;          // flowlet: the group's gap; the flow's cell, times, slot
    bit<32>     cell;
    bit<32>     now;
    bit<32>     last;
    bit<32>     stale_us;        // adaptive: the two sampled slots, their ports, depths, ages
    ecmp_slot_t sample_a;
    ecmp_slot_t sample_b;
    port_t      port_a;
    port_t      port_b;
    qdepth_t    depth_a;
    qdepth_t    depth_b;
    bit<48>     time_a;
    bit<48>     time_b;
}

header failover_scratch_t {      // failover.p4, and heartbeats in source_routing.p4
    bit<48> timeout;             // a port silent this long (us) is dead
    bit<48> now;
    bit<32> path;                // the chosen port's path index toward `edge`
    bit<32> edge;
    bit<8>  by_path;             // 1: failover_destination named the destination's edge switch
    bit<48> port_last;           // when they were last heard
    bit<48> path_last;
}

// INT's sampling at a host port (int_telemetry_source.p4): metadata, not
// a scratch header: every packet entering a host port where INT is on
// uses it, and a header validated for each of them (BMv2 zeroes its fields
// then, and adds it to the packet length, which INT's tx bytes read, so it
// is invalidated again) cost more than two metadata fields, which BMv2
// zeroes for every packet, INT off included (docs/benchmark.md, 2026-12-03).
struct int_sampling_t {
    bit<32>  count;              // the port's count with this packet (0: its sample), then the
                                 // watchlist entry's (0: the entry's sample)
    bit<32>  sample_one_in;      // a port with raised flows: its N (0: none), for the packets
                                 // that are not theirs
}

header int_scratch_t {           // int_telemetry_egress.p4, int_telemetry_drop_report.p4
    bit<32>  node_id;            // egress: the port's INT settings (int_port)
    bit<8>   sink;
    bit<16>  mtu;
    bit<32>  link_rate_mbps;
    qdepth_t queue_threshold;
    bit<32>  queue_interval_us;
    bit<32>  refresh_us;
    bit<32>  tx_bytes;
    bit<32>  flow_slot;          // suppression state cell of the flow
    bit<32>  flow_value;         // this hop's (ports, latency bucket, queue bucket), and last time's
    bit<32>  previous;
    bit<8>   flow_changed;
    bit<32>  now_us;
    bit<32>  last_us;
    bit<8>   due;                // sink: a flow report is due; the queue is over its threshold
    bit<8>   congested;
    bit<32>  seq_no;             // report sequence number, and the next one
    bit<32>  next_seq_no;
    bit<32>  report_bytes;
    bit<16>  inner_bytes;
    bit<32>  interval_us;        // drop reports: the rate limit
    bit<8>   fill_words;         // transit: all-ones words to reach HopML
    bit<992> hop;                // transit: this hop's words so far, the last one lowest (IntHopWords)
    bit<16>  l4_length;          // TCP length for the checksum pseudo-header
    bit<5>   pad;                // BMv2: whole bytes
}

header agg_scratch_t {           // aggregation.p4
    bit<8>   workers;            // the job's: number, this worker's bit, its unicast group
    bit<32>  worker_bit;
    bit<16>  worker_group;
    bit<16>  job_group;
    bit<32>  base;               // the job's slots: base, count, shared (hashed) or by the packet
    bit<32>  slots;
    bit<8>   shared;
    bit<48>  steal_after;        // an unfinished use older than this (us) may be taken over
    bit<8>   trees;              // the job's trees (0: summed here, one level), a power of two
    bit<16>  tree;               // the packet's: its slot mod trees
    bit<32>  server;             // the parameter server address this packet is to or from
    bit<8>   cell_valid;         // the packet has a cell (a job served here, slot in range)
    bit<32>  cell;               // the (slot, shadow set) cell of the packet's block, and its state
    bit<144> state;
    bit<16>  udp_length;         // the job's packets' UDP length: its declared block size
    bit<AGG_WORD_BITS> sum;      // one word's sums in the cell, and the top bit of each lane that
    bit<AGG_WORD_BITS> overflow; // overflowed (aggregation_lanes.p4)
    bit<8>   added;              // the packet's elements went into the cell's use
    bit<8>   answer;             // AGG_ANSWER_*: the packet carries a completed cell's sum
}

header lossless_scratch_t {      // lossless.p4: the class's parameters (traffic_class), its cells and state
    bit<8>   tclass;             // the class it arrived in (the upstream pauses this one)
    bit<8>   out_class;          // the class it leaves in (class_change; else tclass)
    bit<6>   dscp;               // class_change: the DSCP it leaves with
    bit<2>   dscp_pad;
    bit<9>   in_port;            // the port it arrived on (a held packet's, from pfc_carry)
    bit<7>   port_pad;
    bit<8>   lossless;
    bit<3>   hold_queue;
    bit<5>   pad;                // BMv2: whole bytes
    bit<32>  xoff;               // packets admitted from one ingress port
    bit<32>  xon;
    bit<32>  headroom;
    bit<16>  pause_quanta;       // the pause time sent
    bit<48>  refresh_us;         // pause again this often while above XOFF
    bit<48>  detect_us;          // watchdog: 0 = off
    bit<48>  restore_us;
    bit<8>   storm_action;       // PFC_STORM_*
    bit<32>  quantum;            // PfcReceive: a pause quantum of the port, in us * 1024
    bit<32>  in_cell;            // (ingress port, class), (egress port, class)
    bit<32>  out_cell;
    bit<32>  occupancy;
    bit<32>  peak;               // pfc_occupancy_peak's cell
    bit<32>  session;
    bit<48>  now;
    bit<48>  time;               // a register's time: xoff sent, storm found, paused until
    bit<48>  until;
    bit<48>  progress;
    bit<48>  last_pause;
    bit<48>  paused_us;          // PfcReceive: the cell's paused time, and its last frame's time
    bit<48>  last_frame;
    bit<32>  head;
    bit<32>  tail;
    bit<8>   paused;
    bit<8>   storm;              // a storm makes this packet ignore a pause
}

header ecn_scratch_t {           // ecn.p4: the port's marking profile
    qdepth_t kmin;
    qdepth_t kmax;
    bit<32>  pmax_ppm;
    bit<32>  r;                  // WRED's random draw
    bit<2>   pad;                // BMv2: whole bytes
}

header trimming_scratch_t {      // trimming.p4: the queue's entry and its occupancy
    bit<32>  threshold;          // packets in the queue from which a packet is trimmed
    bit<32>  admitted;           // trim_admitted, trim_departed of the cell
    bit<32>  departed;
    bit<32>  bytes;              // what a trimmed packet keeps (truncate's width)
    bit<32>  cell;               // priority ++ egress port (a register index's width)
    bit<3>   header_queue;
    bit<6>   dscp;               // a trimmed packet's
    bit<7>   pad;                // BMv2: whole bytes
}

header nonminimal_scratch_t {    // nonminimal_routing.p4
    bit<32>  flow_hash;          // the 5-tuple's hash times this switch's seed
    bit<16>  target;             // the intermediate: drawn at the source, the tag's in transit
    bit<8>   min_hops;           // UGAL: hops of the minimal path, and of the one through the target
    bit<8>   nonmin_hops;
    bit<32>  threshold;          // packets: what the non-minimal product must beat the minimal one by
    bit<48>  stale_us;           // a port's recorded depth older than this counts as 0
    port_t   nonmin_port;
    qdepth_t min_depth;
    qdepth_t nonmin_depth;
    bit<48>  min_time;
    bit<48>  nonmin_time;
    bit<1>   pad;                // BMv2: whole bytes
}

// INT state that crosses from ingress to egress and the checksum update.
// Four bits, not a bool: the metadata's scalar fields then add up to whole
// bytes, and p4c adds no padding field (which BMv2 would zero for every packet).
struct int_meta_t {
    bit<4>  l4_checksum;      // 1: INT bytes inserted or removed, recompute the TCP/UDP checksum
}

// What a drop report clone (an ingress clone, re-parsed from the packet as
// received) keeps: clone_preserving_field_list copies these fields.
// One field, not three: BMv2 zeroes each metadata field for every packet.
#define REPORT_DROP_REASON(drop) drop[87:80]
#define REPORT_INGRESS_PORT(drop) drop[79:64]
#define REPORT_INGRESS_TS(drop) drop[63:0]
struct int_report_meta_t {
    @field_list(INT_REPORT_FIELDS) bit<88> drop;   // drop reason ++ ingress port (16 bits) ++ ingress timestamp (64)
}

struct local_metadata_t {
    next_id_t     next_id;
    ecmp_slot_t   ecmp_slot;     // slot of the flow in its ECMP group (5-tuple hash, switch seed)
    drop_reason_t drop_reason;
    // Egress work is asked for by ingress: a feature that needs egress for a
    // packet (INT, adaptive load balancing, aggregation results) sets its
    // EGRESS_* bit (defines.p4); every other packet skips egress work on one condition.
    @field_list(INT_REPORT_FIELDS)
    bit<8>        egress_work;
    // 1: this egress pass cloned the packet into a PFC frame (a resume, a
    // pause again: lossless.p4). BMv2 keeps one clone a pass, the last asked
    // for, so a telemetry report's clone must not replace it: the report waits.
    bit<1>        pfc_frame_cloned;
    // Scratch headers (see above).
    parse_scratch_t    parse;
    flow_key_t         flow;
    ecmp_scratch_t     ecmp;
#ifndef WITHOUT_INT_TELEMETRY
    int_meta_t         telemetry;
    int_report_meta_t  report;      // kept by report clones
    int_sampling_t     int_sampling;
    int_scratch_t      int_scratch;
#endif
#ifndef WITHOUT_LOAD_BALANCING
    lb_scratch_t       lb;
#endif
#ifndef WITHOUT_AGGREGATION
    agg_scratch_t      agg;
#endif
#ifndef WITHOUT_FAILOVER
    failover_scratch_t failover;
#endif
#ifndef WITHOUT_ECN
    ecn_scratch_t      ecn;
#endif
#ifndef WITHOUT_NONMINIMAL_ROUTING
    nonminimal_scratch_t nonmin;
#endif
#ifndef WITHOUT_TRIMMING
    trimming_scratch_t trim;
#endif
#ifndef WITHOUT_LOSSLESS
    // A lossless packet's state between ingress and egress (PFC_CARRY_*),
    // and the PFC frame its clone becomes (PFC_FRAME_*): kept through
    // recirculation (held) and into frame clones.
    @field_list(PFC_CARRY_FIELDS)
    bit<64>            pfc_carry;
    @field_list(PFC_CARRY_FIELDS)
    bit<32>            pfc_frame;
    lossless_scratch_t tc;
#endif
}

#endif
