// INT at egress: every hop (source, transit) pushes its metadata; the sink
// strips INT and reports; report clones become Telemetry Report v2.0 packets.
//
// int_port, keyed by (egress port, instance type), says what to do:
//   set_int_port(...)       a normal packet carrying INT leaving a port of an
//                           INT-enabled switch: count its bytes (HPCC's tx
//                           bytes), push this hop or, on a sink port, report
//                           and strip (a packet without INT only has its
//                           bytes counted, by IntTxBytes, without a lookup;
//                           a trimmed or source-routed packet without INT has
//                           them counted here, as it has EGRESS_INT)
//   build_report(...)       a report clone of an INT packet (instance E2E
//                           clone) leaving towards the collector: a flow
//                           report from the sink, or a congestion report (Q)
//                           from a hop whose queue is above the port's threshold
//   build_drop_report(...)  a drop report clone (instance ingress clone,
//                           int_telemetry_drop_report.p4): D flag and the drop reason
// A switch where INT is off pays nothing per packet here: egress_work has
// neither EGRESS_INT (INT's work: set in ingress where a packet takes INT or
// carries it, by drop_report and by source routing) nor EGRESS_INT_TX_BYTES
// (INT on: int_source_port), and main.p4's egress skips every feature's
// egress work on one condition; where INT is on, a packet without INT costs
// one condition more and IntTxBytes.
//
// Suppression (what keeps telemetry cheap): every hop keeps, per flow cell,
// (ingress port, egress port, hop latency bucket, queue bucket); a hop whose
// value changed sets the FABRIC_DS_ID flag INT_DS_FLAG_CHANGED in the INT-MD
// header. The sink reports a flow when that flag is set, when its own value
// changed, or when the flow's refresh period has passed (0: every packet).
// Buckets are the value shifted right by a runtime amount, saturated at 255.
// Congestion reports are rate-limited per port (one per interval).
//
// A flow whose host is its sink (the watchlist rule's FABRIC_DS_ID flag
// INT_DS_FLAG_TO_HOST; HPCC's receiver echoes the stack to the sender): the
// last switch pushes its hop as a transit does and neither reports nor
// strips; the packet reaches the host with UDP port INT_UDP_PORT and the
// original port in the shim.
//
// How the sink's report keeps what the sink strips: BMv2 clones at the end
// of egress, from the headers as egress left them, and only the egress pass
// of the data packet knows its queue (occupancy, hop latency at the sink
// port: the queue incast builds). So the sink keeps its own measurements
// and the IPv4/L4 fields it rewrites, the shim, the MD header and the stack
// in int_saved: a header that is valid but never emitted, so the clone
// inherits it and the data packet leaves without it. Then it clones and
// strips; the clone rebuilds the packet as received. (A header, not
// metadata: BMv2 resets every metadata field of every packet, and only the
// validity of a header.)
#ifndef INT_EGRESS_P4
#define INT_EGRESS_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"
#include "flow_key.p4"

// All-ones words, meta.int_scratch.fill_words of them (at most 31), shifted
// into this hop's metadata: what bits 6-14 and unknown DS metadata get.
// (BMv2 shifts by at most 256 bits, and by a constant here.)
control IntFillWords(inout local_metadata_t meta) {
    apply {
        if (meta.int_scratch.fill_words[4:4] == 1) {
            meta.int_scratch.hop = (meta.int_scratch.hop << 256) | (bit<992>) ~(bit<256>) 0;
            meta.int_scratch.hop = (meta.int_scratch.hop << 256) | (bit<992>) ~(bit<256>) 0;
        }
        if (meta.int_scratch.fill_words[3:3] == 1) {
            meta.int_scratch.hop = (meta.int_scratch.hop << 256) | (bit<992>) ~(bit<256>) 0;
        }
        if (meta.int_scratch.fill_words[2:2] == 1) {
            meta.int_scratch.hop = (meta.int_scratch.hop << 128) | (bit<992>) ~(bit<128>) 0;
        }
        if (meta.int_scratch.fill_words[1:1] == 1) {
            meta.int_scratch.hop = (meta.int_scratch.hop << 64) | (bit<992>) ~(bit<64>) 0;
        }
        if (meta.int_scratch.fill_words[0:0] == 1) {
            meta.int_scratch.hop = (meta.int_scratch.hop << 32) | (bit<992>) ~(bit<32>) 0;
        }
    }
}

// This hop's metadata, HopML words built in meta.int_scratch.hop (the last
// word lowest), as the headers of 16, 8, 4, 2 and 1 words that HopML's bits
// ask for: the 1-word header takes the last word, the 2-word one the two
// before it, and so on up.
control IntHopWords(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        if (hdr.int_md.hop_ml[0:0] == 1) {
            hdr.int_hop1.setValid();
            hdr.int_hop1.words = meta.int_scratch.hop[31:0];
            meta.int_scratch.hop = meta.int_scratch.hop >> 32;
        }
        if (hdr.int_md.hop_ml[1:1] == 1) {
            hdr.int_hop2.setValid();
            hdr.int_hop2.words = meta.int_scratch.hop[63:0];
            meta.int_scratch.hop = meta.int_scratch.hop >> 64;
        }
        if (hdr.int_md.hop_ml[2:2] == 1) {
            hdr.int_hop4.setValid();
            hdr.int_hop4.words = meta.int_scratch.hop[127:0];
            meta.int_scratch.hop = meta.int_scratch.hop >> 128;
        }
        if (hdr.int_md.hop_ml[3:3] == 1) {
            hdr.int_hop8.setValid();
            hdr.int_hop8.words = meta.int_scratch.hop[255:0];
            meta.int_scratch.hop = meta.int_scratch.hop >> 256;
        }
        if (hdr.int_md.hop_ml[4:4] == 1) {
            hdr.int_hop16.setValid();
            hdr.int_hop16.words = meta.int_scratch.hop[511:0];
        }
    }
}

// Report metadata: RepMdBits 1-5 (L1 ports, hop latency, queue, ingress and
// egress timestamps: 7 words) and FABRIC_DS_ID bits 0-2 (3 words).
const bit<16> REPORT_MD_BITS = 0x7C00;
const bit<16> REPORT_DS_MD_BITS = 0xE000;
const bit<8>  REPORT_MD_WORDS = 10;
const bit<16> REPORT_HEADERS_BYTES = 14 + 20 + 8 + 8 + 4 + 8;  // Ethernet .. INT main contents
const bit<16> REPORT_MD_BYTES = 40;
// Drop reports: RepMdBits 1 (L1 ports), 4 (ingress timestamp), 15 (queue id
// + drop reason): 4 words; then the dropped packet from IPv4 on, cut to
// DROP_REPORT_INNER_BYTES.
const bit<16> DROP_REPORT_MD_BITS = 0x4801;
const bit<8>  DROP_REPORT_MD_WORDS = 4;
const bit<16> DROP_REPORT_MD_BYTES = 16;
const bit<16> DROP_REPORT_INNER_BYTES = 64;

// A bucket: a 32-bit value's low 8 bits, all ones from 256 on (no ?: in an
// action: flow_key.p4).
#define INT_BUCKET(v) ((v)[7:0] | (8w0 - (bit<8>) (bit<1>) ((v) > 255)))

// Bytes sent per port, mod 2^32 (HPCC's tx bytes, the collector's port
// rates): every packet leaving a port of a switch where INT is on. Outside
// the controls: IntTxBytes counts, IntEgress reads it for a hop's tx bytes.
register<bit<32>, port_t>(PORT_COUNT) int_tx_bytes;

// A packet without INT where INT is on: its bytes counted, nothing else (no
// table, no scratch header): main.p4's egress applies it where the packet's
// egress work has EGRESS_INT_TX_BYTES and not EGRESS_INT.
control IntTxBytes(in standard_metadata_t std_meta) {
    // (Written from the local, not from the sum: p4c would add a metadata
    // temporary for the expression, which every packet of every program
    // pays for.)
    action count_tx_bytes() {
        bit<32> sent;
        int_tx_bytes.read(sent, std_meta.egress_port);
        sent = sent + std_meta.packet_length;
        int_tx_bytes.write(std_meta.egress_port, sent);
    }

    apply {
        count_tx_bytes();
    }
}

control IntEgress(inout headers_t hdr,
                  inout local_metadata_t meta,
                  inout standard_metadata_t std_meta) {
    register<bit<32>, bit<32>>(1) report_seq_no;                     // next report sequence number (hw_id 0)
    register<bit<32>, bit<32>>(INT_FLOW_SLOTS) int_flow_state;       // ports and buckets a flow had last
    register<bit<32>, bit<32>>(INT_FLOW_SLOTS) int_flow_report_time; // sink: when the flow was last reported (us)
    register<bit<32>, port_t>(PORT_COUNT) queue_report_time;          // when the port last sent a congestion report
    counter<bit<32>>(REPORT_KINDS, CounterType.packets) int_report_counter;

    IntFillWords() fill_words;
    IntHopWords() hop_words;

    action set_int_port(bit<32> switch_id, bit<1> is_sink, bit<16> port_mtu, bit<32> port_rate_mbps,
                        qdepth_t queue_report_threshold, bit<32> queue_report_interval_us,
                        bit<8> latency_bucket_shift, bit<8> queue_bucket_shift, bit<32> flow_refresh_us) {
        meta.int_scratch.setValid();
        meta.int_scratch.node_id = switch_id;
        meta.int_scratch.sink = (bit<8>) is_sink;
        meta.int_scratch.mtu = port_mtu;
        meta.int_scratch.link_rate_mbps = port_rate_mbps;
        meta.int_scratch.queue_threshold = queue_report_threshold;
        meta.int_scratch.queue_interval_us = queue_report_interval_us;
        // This hop's flow value, in one write (each field BMv2 writes costs:
        // docs/benchmark.md): ingress port, egress port, and the hop latency
        // and queue shifted into buckets (INT_BUCKET: at most 255).
        meta.int_scratch.flow_value = std_meta.ingress_port[7:0] ++ std_meta.egress_port[7:0]
            ++ INT_BUCKET((bit<32>) (std_meta.egress_global_timestamp - std_meta.ingress_global_timestamp)
                          >> latency_bucket_shift)
            ++ INT_BUCKET((bit<32>) std_meta.enq_qdepth >> queue_bucket_shift);
        meta.int_scratch.refresh_us = flow_refresh_us;
        int_tx_bytes.read(meta.int_scratch.tx_bytes, std_meta.egress_port);
        meta.int_scratch.tx_bytes = meta.int_scratch.tx_bytes + std_meta.packet_length;
    }

    // Register writes of values computed in another action: in the same
    // action p4c would substitute the expression and add a metadata temporary.
    action store_tx_bytes() {
        int_tx_bytes.write(std_meta.egress_port, meta.int_scratch.tx_bytes);
    }

    action store_flow_state() {
        int_flow_state.write(meta.int_scratch.flow_slot, meta.int_scratch.flow_value);
        meta.int_scratch.flow_changed = (bit<8>) (bit<1>) (meta.int_scratch.previous != meta.int_scratch.flow_value);
    }

    // The flow's 5-tuple (meta.flow): its hash picks the flow's state cell.
    FlowKey() flow_key;

    action track_flow() {
        hash(meta.int_scratch.flow_slot, HashAlgorithm.crc32, 32w0, meta.flow, INT_FLOW_SLOTS);
        int_flow_state.read(meta.int_scratch.previous, meta.int_scratch.flow_slot);
        // stored times are >= 1: 0 means never
        meta.int_scratch.now_us = (bit<32>) std_meta.egress_global_timestamp
                                  | (bit<32>) (bit<1>) ((bit<32>) std_meta.egress_global_timestamp == 0);
    }

    action read_flow_report_time() {
        int_flow_report_time.read(meta.int_scratch.last_us, meta.int_scratch.flow_slot);
    }

    action write_flow_report_time() {
        int_flow_report_time.write(meta.int_scratch.flow_slot, meta.int_scratch.now_us);
    }

    action read_queue_report_time() {
        queue_report_time.read(meta.int_scratch.last_us, std_meta.egress_port);
    }

    action write_queue_report_time() {
        queue_report_time.write(std_meta.egress_port, meta.int_scratch.now_us);
    }

    // ---- transit: push this hop (INT v2.1 section 5.7) ---------------------

    // The all-ones words this hop's metadata needs to reach HopML: what the
    // bitmaps ask for that this switch does not provide (the parser checked
    // HopML holds it; a source's own INT-MD header is right by construction).
    action count_fill() {
        meta.int_scratch.fill_words = (bit<8>) hdr.int_md.hop_ml - INT_BASELINE_WORDS(hdr.int_md.instruction_bitmap)
            - (hdr.int_md.ds_id == FABRIC_DS_ID ? INT_FABRIC_DS_WORDS(hdr.int_md.ds_instruction) : 8w0);
    }

    action push_done(bit<16> hop_bytes) {
        hdr.int_md.remaining_hop_cnt = hdr.int_md.remaining_hop_cnt - 1;
        hdr.int_shim.len = hdr.int_shim.len + (bit<8>) hdr.int_md.hop_ml;
        hdr.ipv4.total_len = hdr.ipv4.total_len + hop_bytes;
        hdr.udp.length = hdr.udp.length + hop_bytes;    // no effect on TCP packets (udp invalid)
        meta.telemetry.l4_checksum = 1;
    }

    // The default instructions (INT_DEFAULT_BITMAP), and the fabric domain's
    // three words after them, straight into the headers HopML 8 and 11 ask
    // for: no arithmetic on 992 bits.
    action push_default_words() {
        hdr.int_hop8.setValid();
        hdr.int_hop8.words = meta.int_scratch.node_id
            ++ (bit<16>) std_meta.ingress_port ++ (bit<16>) std_meta.egress_port
            ++ (bit<32>) (std_meta.egress_global_timestamp - std_meta.ingress_global_timestamp)
            ++ 8w0 ++ (bit<24>) std_meta.enq_qdepth
            ++ (bit<64>) std_meta.ingress_global_timestamp ++ (bit<64>) std_meta.egress_global_timestamp;
    }

    action push_fabric_ds_words() {
        hdr.int_hop2.setValid();
        hdr.int_hop2.words = meta.int_scratch.tx_bytes ++ (bit<32>) std_meta.egress_global_timestamp;
        hdr.int_hop1.setValid();
        hdr.int_hop1.words = meta.int_scratch.link_rate_mbps;
    }

    // ---- sink: keep what the report needs, clone, strip -------------------

    action save_for_report() {
        hdr.int_saved.setValid();
        hdr.int_saved.ingress_port = (bit<16>) std_meta.ingress_port;
        hdr.int_saved.egress_port = (bit<16>) std_meta.egress_port;
        hdr.int_saved.hop_latency = (bit<32>) (std_meta.egress_global_timestamp - std_meta.ingress_global_timestamp);
        hdr.int_saved.queue_occupancy = (bit<24>) std_meta.enq_qdepth;
        hdr.int_saved.ingress_ts = (bit<64>) std_meta.ingress_global_timestamp;
        hdr.int_saved.egress_ts = (bit<64>) std_meta.egress_global_timestamp;
        hdr.int_saved.tx_bytes = meta.int_scratch.tx_bytes;
        hdr.int_saved.link_rate_mbps = meta.int_scratch.link_rate_mbps;
        hdr.int_saved.ipv4_total_len = hdr.ipv4.total_len;
        hdr.int_saved.ipv4_dscp = hdr.ipv4.dscp;
        hdr.int_saved.ipv4_checksum = hdr.ipv4.hdr_checksum;
        hdr.int_saved.l4_dst_port = hdr.udp.dst_port;
        hdr.int_saved.udp_length = hdr.udp.length;
        hdr.int_saved.l4_checksum = hdr.udp.checksum;     // TCP: the caller replaces it
        hdr.int_saved.int_shim = hdr.int_shim.int_type ++ hdr.int_shim.npt ++ hdr.int_shim.rsvd ++ hdr.int_shim.len
                               ++ hdr.int_shim.npt_field;
        hdr.int_saved.int_md = hdr.int_md.ver ++ hdr.int_md.d ++ hdr.int_md.e ++ hdr.int_md.m ++ hdr.int_md.rsvd
                             ++ hdr.int_md.hop_ml ++ hdr.int_md.remaining_hop_cnt ++ hdr.int_md.instruction_bitmap
                             ++ hdr.int_md.ds_id ++ hdr.int_md.ds_instruction ++ hdr.int_md.ds_flags;
        hdr.int_saved.has_stack = 0;            // save_stack sets it when the packet has a stack
        // IPv4 header + L4 header + shim + MD header + stack
        hdr.int_saved.inner_bytes = ((bit<16>) IPV4_IHL(hdr.ipv4) << 2) + 8 + 4 + ((bit<16>) hdr.int_shim.len << 2);
        hdr.int_saved.intermediate = 0;
        hdr.int_saved.congested = 0;
        meta.egress_work = EGRESS_INT;     // what the clone keeps: INT's work only (the others' is done: main.p4)
        clone_preserving_field_list(CloneType.E2E, REPORT_MIRROR_SESSION, INT_REPORT_FIELDS);
    }

    action strip_int() {
        meta.int_scratch.inner_bytes = 4 + ((bit<16>) hdr.int_shim.len << 2);     // the INT bytes
        hdr.ipv4.total_len = hdr.ipv4.total_len - meta.int_scratch.inner_bytes;
        hdr.udp.length = hdr.udp.length - meta.int_scratch.inner_bytes;    // no effect on TCP packets (udp invalid)
        hdr.int_shim.setInvalid();
        hdr.int_md.setInvalid();
        hdr.int_stack.setInvalid();
        meta.telemetry.l4_checksum = 1;
    }

    // ---- the report around a clone: outer Ethernet/IPv4 (the packet's own
    // headers, rewritten; inner_ipv4 is the copy reported) and UDP, group header
    // with the next sequence number, and the individual report's common fields;
    // the callers add lengths and metadata.

    action report_headers(mac_addr_t src_mac, mac_addr_t dst_mac, ipv4_addr_t src_addr,
                          ipv4_addr_t collector_addr, bit<16> collector_port, bit<32> switch_id,
                          bit<16> ip_bytes) {
        hdr.ethernet.src_addr = src_mac;
        hdr.ethernet.dst_addr = dst_mac;
        hdr.ethernet.ether_type = ETHERTYPE_IPV4;
        hdr.vlan.setInvalid();                      // an ingress clone is parsed again: its tag is back
#ifndef WITHOUT_LOSSLESS
        hdr.pfc.setInvalid();                       // ... and a MAC control frame's PFC header (a drop report
                                                    // of a PFC frame: it would sit between Ethernet and IPv4)
#endif
        hdr.ipv4.setValid();
        hdr.ipv4.version_ihl = IPV4_VERSION_IHL;
        hdr.ipv4.dscp = 0;
        hdr.ipv4.ecn = 0;
        hdr.ipv4.total_len = ip_bytes;
        hdr.ipv4.id_flags_frag = IPV4_FLAG_DF;      // identification 0, DF (Telemetry Report v2.0), offset 0
        hdr.ipv4.ttl = 64;
        hdr.ipv4.protocol = IP_PROTO_UDP;
        hdr.ipv4.src_addr = src_addr;
        hdr.ipv4.dst_addr = collector_addr;
        hdr.report.setValid();
        hdr.report.udp_src_port = REPORT_UDP_PORT;
        hdr.report.udp_dst_port = collector_port;
        hdr.report.udp_length = ip_bytes - 20;
        hdr.report.udp_checksum = 0;
        report_seq_no.read(meta.int_scratch.seq_no, 0);
        meta.int_scratch.next_seq_no = (meta.int_scratch.seq_no + 1) & 0x3FFFFF;
        hdr.report.ver = REPORT_VERSION;
        hdr.report.hw_id = 0;
        hdr.report.seq_no = meta.int_scratch.seq_no[21:0];
        hdr.report.node_id = switch_id;
        hdr.report.rep_type = 1;         // INT
        hdr.report.in_type = 4;          // IPv4
        hdr.report.rsvd = 0;
        hdr.report.ds_md_status = 0;
    }

    // ---- report clone: Telemetry Report v2.0 around the kept packet --------

    action build_report(mac_addr_t src_mac, mac_addr_t dst_mac, ipv4_addr_t src_addr,
                        ipv4_addr_t collector_addr, bit<16> collector_port, bit<32> switch_id) {
        meta.int_scratch.setValid();
        // The reported packet, as the sink received it.
        hdr.inner_ipv4 = hdr.ipv4;
        hdr.inner_ipv4.total_len = hdr.int_saved.ipv4_total_len;
        hdr.inner_ipv4.dscp = hdr.int_saved.ipv4_dscp;
        hdr.inner_ipv4.hdr_checksum = hdr.int_saved.ipv4_checksum;
        hdr.inner_ipv4.ttl = hdr.ipv4.ttl + 1;      // ingress decremented it
        hdr.udp.dst_port = hdr.int_saved.l4_dst_port;     // the one of udp / tcp that is valid
        hdr.udp.length = hdr.int_saved.udp_length;
        hdr.udp.checksum = hdr.int_saved.l4_checksum;
        hdr.tcp.checksum = hdr.int_saved.l4_checksum;
        hdr.int_shim.setValid();
        hdr.int_shim.int_type = hdr.int_saved.int_shim[31:28];
        hdr.int_shim.npt = hdr.int_saved.int_shim[27:26];
        hdr.int_shim.rsvd = hdr.int_saved.int_shim[25:24];
        hdr.int_shim.len = hdr.int_saved.int_shim[23:16];
        hdr.int_shim.npt_field = hdr.int_saved.int_shim[15:0];
        hdr.int_md.setValid();
        hdr.int_md.ver = hdr.int_saved.int_md[95:92];
        hdr.int_md.d = hdr.int_saved.int_md[91:91];
        hdr.int_md.e = hdr.int_saved.int_md[90:90];
        hdr.int_md.m = hdr.int_saved.int_md[89:89];
        hdr.int_md.rsvd = hdr.int_saved.int_md[88:77];
        hdr.int_md.hop_ml = hdr.int_saved.int_md[76:72];
        hdr.int_md.remaining_hop_cnt = hdr.int_saved.int_md[71:64];
        hdr.int_md.instruction_bitmap = hdr.int_saved.int_md[63:48];
        hdr.int_md.ds_id = hdr.int_saved.int_md[47:32];
        hdr.int_md.ds_instruction = hdr.int_saved.int_md[31:16];
        hdr.int_md.ds_flags = hdr.int_saved.int_md[15:0];
        // A congestion report's packet had this hop pushed: not part of what it received.
        hdr.int_hop16.setInvalid();
        hdr.int_hop8.setInvalid();
        hdr.int_hop4.setInvalid();
        hdr.int_hop2.setInvalid();
        hdr.int_hop1.setInvalid();

        // The report around it.
        meta.int_scratch.report_bytes = (bit<32>) (REPORT_HEADERS_BYTES + REPORT_MD_BYTES + hdr.int_saved.inner_bytes);
        report_headers(src_mac, dst_mac, src_addr, collector_addr, collector_port, switch_id,
                       REPORT_HEADERS_BYTES + REPORT_MD_BYTES + hdr.int_saved.inner_bytes - 14);
        hdr.report.report_length = (bit<8>) ((8 + REPORT_MD_BYTES + hdr.int_saved.inner_bytes) >> 2);
        hdr.report.md_length = REPORT_MD_WORDS;
        hdr.report.d = 0;
        hdr.report.q = hdr.int_saved.congested;
        hdr.report.f = 1;
        hdr.report.i = hdr.int_saved.intermediate;
        hdr.report.rep_md_bits = REPORT_MD_BITS;
        hdr.report.ds_id = FABRIC_DS_ID;
        hdr.report.ds_md_bits = REPORT_DS_MD_BITS;
        hdr.report_int_md.setValid();
        hdr.report_int_md.ingress_port = hdr.int_saved.ingress_port;
        hdr.report_int_md.egress_port = hdr.int_saved.egress_port;
        hdr.report_int_md.hop_latency = hdr.int_saved.hop_latency;
        hdr.report_int_md.queue_id = 0;
        hdr.report_int_md.queue_occupancy = hdr.int_saved.queue_occupancy;
        hdr.report_int_md.ingress_ts = hdr.int_saved.ingress_ts;
        hdr.report_int_md.egress_ts = hdr.int_saved.egress_ts;
        hdr.report_int_md.tx_bytes = hdr.int_saved.tx_bytes;
        hdr.report_int_md.tx_time = hdr.int_saved.egress_ts[31:0];
        hdr.report_int_md.link_rate_mbps = hdr.int_saved.link_rate_mbps;
    }

    // The stack the packet arrived with (apply: when it had one). Copying
    // the varbit of an invalid (empty) stack crashes BMv2 (SIGFPE): a packet
    // whose source is this switch has none.
    action save_stack() {
        hdr.int_saved.has_stack = 1;
        hdr.int_saved.int_stack = hdr.int_stack.words;
    }

    action restore_stack() {
        hdr.int_stack.setValid();
        hdr.int_stack.words = hdr.int_saved.int_stack;
    }

    action store_report_seq_no() {
        report_seq_no.write(0, meta.int_scratch.next_seq_no);
    }

    action truncate_report() {
        truncate(meta.int_scratch.report_bytes);
    }

    // ---- drop report clone (int_telemetry_drop_report.p4): the packet as received --------

    action build_drop_report(mac_addr_t src_mac, mac_addr_t dst_mac, ipv4_addr_t src_addr,
                             ipv4_addr_t collector_addr, bit<16> collector_port, bit<32> switch_id) {
        meta.int_scratch.setValid();
        hdr.inner_ipv4 = hdr.ipv4;                  // L4 header and the rest: the packet's own
        // Report Length 0xFF: to the end of the datagram, the inner packet cut
        // to DROP_REPORT_INNER_BYTES (apply: none if it was not IPv4).
        meta.int_scratch.inner_bytes = (bit<16>) std_meta.packet_length - 14;
        meta.int_scratch.inner_bytes = (meta.int_scratch.inner_bytes > DROP_REPORT_INNER_BYTES
                                        ? DROP_REPORT_INNER_BYTES : meta.int_scratch.inner_bytes);
        report_headers(src_mac, dst_mac, src_addr, collector_addr, collector_port, switch_id,
                       REPORT_HEADERS_BYTES - 14 + DROP_REPORT_MD_BYTES + meta.int_scratch.inner_bytes);
        hdr.report.report_length = 0xFF;
        hdr.report.md_length = DROP_REPORT_MD_WORDS;
        hdr.report.d = 1;
        hdr.report.q = 0;
        hdr.report.f = 0;
        hdr.report.i = 1;
        hdr.report.rep_md_bits = DROP_REPORT_MD_BITS;
        hdr.report.ds_id = 0;
        hdr.report.ds_md_bits = 0;
        hdr.report_drop_md.setValid();
        hdr.report_drop_md.ingress_port = REPORT_INGRESS_PORT(meta.report.drop);
        hdr.report_drop_md.egress_port = 0xFFFF;      // none chosen, or not the reason
        hdr.report_drop_md.ingress_ts = REPORT_INGRESS_TS(meta.report.drop);
        hdr.report_drop_md.queue_id = 0;
        hdr.report_drop_md.drop_reason = REPORT_DROP_REASON(meta.report.drop);
        hdr.report_drop_md.pad = 0;
        truncate((bit<32>) (REPORT_HEADERS_BYTES + DROP_REPORT_MD_BYTES + DROP_REPORT_INNER_BYTES));
    }

    table int_port {
        key = {
            std_meta.egress_port:   exact;
            std_meta.instance_type: exact;
        }
        actions = {
            set_int_port;
            build_report;
            build_drop_report;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = 3 * PORT_COUNT;
    }


    // The TCP length for the checksum's pseudo-header: no IPv4 options
    // (the parser takes TCP only with IHL 5).
    action tcp_length() {
        meta.int_scratch.l4_length = hdr.ipv4.total_len - IPV4_BYTES;
    }

    apply {
        switch (int_port.apply().action_run) {
            set_int_port: {
                store_tx_bytes();
                if (hdr.int_md.isValid()) {
                    flow_key.apply(hdr, meta);
                    track_flow();
                    store_flow_state();
                    if (meta.int_scratch.sink == 1
                            && (hdr.int_md.ds_id != FABRIC_DS_ID || (hdr.int_md.ds_flags & INT_DS_FLAG_TO_HOST) == 0)) {
                        // Sink: report when something changed or the refresh is due, or
                        // (rate-limited) when its queue is above the threshold; then strip.
                        meta.int_scratch.due = 0;
                        meta.int_scratch.congested = 0;
                        read_flow_report_time();
                        if (meta.pfc_frame_cloned == 1) {
                            // Its clone is a PFC frame's: no report from this packet and no
                            // report time written, so the flow's next packet reports instead
                            // (a change this one carried shows in that report's hops).
                            int_report_counter.count(REPORT_YIELDED);
                        } else if (meta.int_scratch.refresh_us == 0 || meta.int_scratch.flow_changed == 1
                                || (hdr.int_md.ds_id == FABRIC_DS_ID
                                    && hdr.int_md.ds_flags & INT_DS_FLAG_CHANGED != 0)
                                || meta.int_scratch.last_us == 0
                                || meta.int_scratch.now_us - meta.int_scratch.last_us >= meta.int_scratch.refresh_us) {
                            meta.int_scratch.due = 1;
                        }
                        if (std_meta.enq_qdepth >= meta.int_scratch.queue_threshold && meta.pfc_frame_cloned == 0) {
                            read_queue_report_time();
                            if (meta.int_scratch.last_us == 0
                                || meta.int_scratch.now_us - meta.int_scratch.last_us >= meta.int_scratch.queue_interval_us) {
                                meta.int_scratch.congested = 1;
                                write_queue_report_time();
                            } else {
                                int_report_counter.count(REPORT_QUEUE_LIMITED);
                            }
                        }
                        if (meta.int_scratch.due == 1 || meta.int_scratch.congested == 1) {
                            save_for_report();
                            if (hdr.int_stack.isValid()) {
                                save_stack();
                            }
                            if (hdr.tcp.isValid()) {
                                hdr.int_saved.l4_checksum = hdr.tcp.checksum;
                                hdr.int_saved.inner_bytes = hdr.int_saved.inner_bytes
                                                            + ((bit<16>) hdr.tcp.data_offset << 2) - 8;
                            }
                            write_flow_report_time();
                        }
                        if (meta.int_scratch.congested == 1) {
                            hdr.int_saved.congested = 1;
                            int_report_counter.count(REPORT_QUEUE);
                        } else if (meta.int_scratch.due == 1) {
                            int_report_counter.count(REPORT_FLOW);
                        } else if (meta.pfc_frame_cloned == 0) {
                            int_report_counter.count(REPORT_SUPPRESSED);
                        }
                        if (hdr.int_shim.npt == INT_NPT_UDP_PORT) {
                            hdr.udp.dst_port = hdr.int_shim.npt_field;
                        } else {
                            hdr.ipv4.dscp = hdr.int_shim.npt_field[7:2];
                        }
                        if (hdr.int_md.d == 1) {
                            mark_to_drop(std_meta);
                        }
                        strip_int();
                    } else {
                        // Transit (and source, and the last switch of a flow whose host is
                        // its sink, INT_DS_FLAG_TO_HOST): a congestion report first, from
                        // the packet as received (unless its clone is a PFC frame's).
                        if (std_meta.enq_qdepth >= meta.int_scratch.queue_threshold && meta.pfc_frame_cloned == 1) {
                            int_report_counter.count(REPORT_YIELDED);
                        } else if (std_meta.enq_qdepth >= meta.int_scratch.queue_threshold) {
                            read_queue_report_time();
                            if (meta.int_scratch.last_us == 0
                                || meta.int_scratch.now_us - meta.int_scratch.last_us >= meta.int_scratch.queue_interval_us) {
                                save_for_report();
                                if (hdr.int_stack.isValid()) {
                                    save_stack();
                                }
                                if (hdr.tcp.isValid()) {
                                    hdr.int_saved.l4_checksum = hdr.tcp.checksum;
                                    hdr.int_saved.inner_bytes = hdr.int_saved.inner_bytes
                                                              + ((bit<16>) hdr.tcp.data_offset << 2) - 8;
                                }
                                hdr.int_saved.congested = 1;
                                hdr.int_saved.intermediate = 1;
                                write_queue_report_time();
                                int_report_counter.count(REPORT_QUEUE);
                            } else {
                                int_report_counter.count(REPORT_QUEUE_LIMITED);
                            }
                        }
                        if (meta.int_scratch.flow_changed == 1 && hdr.int_md.ds_id == FABRIC_DS_ID) {
                            hdr.int_md.ds_flags = hdr.int_md.ds_flags | INT_DS_FLAG_CHANGED;
                        }
                        if (hdr.int_md.remaining_hop_cnt == 0) {
                            hdr.int_md.e = 1;
                        } else if (hdr.ipv4.total_len + ((bit<16>) hdr.int_md.hop_ml << 2) > meta.int_scratch.mtu
                                   || hdr.int_shim.len - INT_HEADER_WORDS + (bit<8>) hdr.int_md.hop_ml
                                      > INT_MAX_STACK_WORDS_C) {
                            hdr.int_md.m = 1;
                        } else if (hdr.int_md.instruction_bitmap == INT_DEFAULT_BITMAP && hdr.int_md.hop_ml == 8) {
                            push_default_words();
                            push_done(8 << 2);
                        } else if (hdr.int_md.instruction_bitmap == INT_DEFAULT_BITMAP && hdr.int_md.hop_ml == 11
                                   && hdr.int_md.ds_id == FABRIC_DS_ID && hdr.int_md.ds_instruction[15:13] == 7) {
                            push_default_words();
                            push_fabric_ds_words();
                            push_done(11 << 2);
                        } else {
                            // Any other bitmap: shifted in, one instruction after the other
                            // (INT_BASELINE_WORDS; the domain's three words, HPCC's, in one step).
                            meta.int_scratch.hop = 0;
                            if (hdr.int_md.instruction_bitmap[15:15] == 1) {        // node id
                                meta.int_scratch.hop = (bit<992>) meta.int_scratch.node_id;
                            }
                            if (hdr.int_md.instruction_bitmap[14:14] == 1) {        // L1 ingress and egress port
                                meta.int_scratch.hop = (meta.int_scratch.hop << 32)
                                    | (bit<992>) ((bit<16>) std_meta.ingress_port ++ (bit<16>) std_meta.egress_port);
                            }
                            if (hdr.int_md.instruction_bitmap[13:13] == 1) {        // hop latency
                                meta.int_scratch.hop = (meta.int_scratch.hop << 32)
                                    | (bit<992>) (bit<32>) (std_meta.egress_global_timestamp - std_meta.ingress_global_timestamp);
                            }
                            if (hdr.int_md.instruction_bitmap[12:12] == 1) {        // queue id 0, occupancy
                                meta.int_scratch.hop = (meta.int_scratch.hop << 32) | (bit<992>) (bit<24>) std_meta.enq_qdepth;
                            }
                            if (hdr.int_md.instruction_bitmap[11:11] == 1) {        // ingress timestamp
                                meta.int_scratch.hop = (meta.int_scratch.hop << 64) | (bit<992>) std_meta.ingress_global_timestamp;
                            }
                            if (hdr.int_md.instruction_bitmap[10:10] == 1) {        // egress timestamp
                                meta.int_scratch.hop = (meta.int_scratch.hop << 64) | (bit<992>) std_meta.egress_global_timestamp;
                            }
                            count_fill();
                            if (meta.int_scratch.fill_words != 0) {                 // bits 6-14, unknown DS metadata: all-ones
                                fill_words.apply(meta);
                            }
                            if (hdr.int_md.ds_id == FABRIC_DS_ID && hdr.int_md.ds_instruction[15:13] == 7) {
                                meta.int_scratch.hop = (meta.int_scratch.hop << 96)  // tx bytes, tx time, link rate
                                    | (bit<992>) (meta.int_scratch.tx_bytes ++ (bit<32>) std_meta.egress_global_timestamp
                                                  ++ meta.int_scratch.link_rate_mbps);
                            } else if (hdr.int_md.ds_id == FABRIC_DS_ID) {
                                if (hdr.int_md.ds_instruction[15:15] == 1) {        // tx bytes
                                    meta.int_scratch.hop = (meta.int_scratch.hop << 32) | (bit<992>) meta.int_scratch.tx_bytes;
                                }
                                if (hdr.int_md.ds_instruction[14:14] == 1) {        // tx time
                                    meta.int_scratch.hop = (meta.int_scratch.hop << 32)
                                        | (bit<992>) (bit<32>) std_meta.egress_global_timestamp;
                                }
                                if (hdr.int_md.ds_instruction[13:13] == 1) {        // link rate
                                    meta.int_scratch.hop = (meta.int_scratch.hop << 32) | (bit<992>) meta.int_scratch.link_rate_mbps;
                                }
                            }
                            if (hdr.int_md.instruction_bitmap[0:0] == 1) {          // checksum complement: all-ones
                                meta.int_scratch.hop = (meta.int_scratch.hop << 32) | 0xFFFFFFFF;
                            }
                            hop_words.apply(hdr, meta);
                            push_done((bit<16>) hdr.int_md.hop_ml << 2);
                        }
                    }
                }
                if (hdr.tcp.isValid()) {         // its checksum's pseudo-header (UDP's has udp.length)
                    tcp_length();
                }
            }
            build_report: {
                if (hdr.int_saved.has_stack == 1) {
                    restore_stack();
                }
                hdr.int_saved.setInvalid();
                store_report_seq_no();
                truncate_report();
            }
            build_drop_report: {
                store_report_seq_no();
                int_report_counter.count(REPORT_DROP);
                // InType IPv4 when the dropped packet was one, else no inner packet.
                if (hdr.inner_ipv4.isValid()) {
                    hdr.report.in_type = 4;
                } else {
                    hdr.report.in_type = 0;
                    hdr.ipv4.total_len = REPORT_HEADERS_BYTES - 14 + DROP_REPORT_MD_BYTES;
                    hdr.report.udp_length = hdr.ipv4.total_len - 20;
                    truncate((bit<32>) (REPORT_HEADERS_BYTES + DROP_REPORT_MD_BYTES));
                }
            }
        }
    }
}

#endif
