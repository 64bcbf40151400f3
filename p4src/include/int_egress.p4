// INT at egress: every hop (source, transit) pushes its metadata; the sink
// strips INT and reports; report clones become Telemetry Report v2.0 packets.
//
// int_port, keyed by (egress port, instance type), says what to do:
//   set_int_port(...)  a normal packet leaving a port of an INT-enabled
//                      switch: count its bytes (HPCC's tx bytes), and if it
//                      carries INT push this hop or, on a sink port, report
//                      and strip
//   build_report(...)  a report clone (instance E2E clone) leaving towards
//                      the collector: wrap what it kept into a report
// A switch without entries (INT off) pays one table miss per packet.
//
// Why the sink saves the stack into metadata: BMv2 clones at the end of
// egress, from the headers as egress left them, and only the egress pass of
// the data packet knows its queue (occupancy, hop latency at the sink port,
// the queue incast builds). So the sink copies what the report needs
// (shim, MD header, stack words, rewritten IPv4/L4 fields, its own
// measurements) into the @field_list(INT_REPORT_FIELDS) metadata, clones,
// and then strips; the clone rebuilds the received packet from it.
#ifndef INT_EGRESS_P4
#define INT_EGRESS_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

// The stack (INT_MAX_STACK_WORDS = 64 words) is kept in eight 256-bit
// fields (BMv2 shifts at most 256 bits): word i+j of field f is at bits
// [32j+31:32j].
#define SAVE_WORD(f, i, j) meta.report.f[32 * (j) + 31:32 * (j)] = hdr.int_stack[(i) + (j)].data;
#define SAVE_8_WORDS(f, i) SAVE_WORD(f, i, 0) SAVE_WORD(f, i, 1) SAVE_WORD(f, i, 2) SAVE_WORD(f, i, 3) \
    SAVE_WORD(f, i, 4) SAVE_WORD(f, i, 5) SAVE_WORD(f, i, 6) SAVE_WORD(f, i, 7)
#define RESTORE_WORD(f, i, j) hdr.int_stack[(i) + (j)].setValid(); \
    hdr.int_stack[(i) + (j)].data = meta.report.f[32 * (j) + 31:32 * (j)];
#define RESTORE_8_WORDS(f, i) RESTORE_WORD(f, i, 0) RESTORE_WORD(f, i, 1) RESTORE_WORD(f, i, 2) \
    RESTORE_WORD(f, i, 3) RESTORE_WORD(f, i, 4) RESTORE_WORD(f, i, 5) RESTORE_WORD(f, i, 6) RESTORE_WORD(f, i, 7)
#define FILL_WORD(i) hdr.int_fill[i].setValid(); hdr.int_fill[i].data = 0xFFFFFFFF;

// All-ones words, meta.telemetry.fill_words of them (at most 31), pushed
// in chunks of 1, 2, 4, 8 and 16: what bits 6-14 and unknown DS metadata get.
control IntFill(inout headers_t hdr, in local_metadata_t meta) {
    apply {
        bit<8> n = meta.telemetry.fill_words;
        if (n[0:0] == 1) { hdr.int_fill.push_front(1); FILL_WORD(0) }
        if (n[1:1] == 1) { hdr.int_fill.push_front(2); FILL_WORD(0) FILL_WORD(1) }
        if (n[2:2] == 1) { hdr.int_fill.push_front(4); FILL_WORD(0) FILL_WORD(1) FILL_WORD(2) FILL_WORD(3) }
        if (n[3:3] == 1) {
            hdr.int_fill.push_front(8);
            FILL_WORD(0) FILL_WORD(1) FILL_WORD(2) FILL_WORD(3) FILL_WORD(4) FILL_WORD(5) FILL_WORD(6) FILL_WORD(7)
        }
        if (n[4:4] == 1) {
            hdr.int_fill.push_front(16);
            FILL_WORD(0) FILL_WORD(1) FILL_WORD(2) FILL_WORD(3) FILL_WORD(4) FILL_WORD(5) FILL_WORD(6) FILL_WORD(7)
            FILL_WORD(8) FILL_WORD(9) FILL_WORD(10) FILL_WORD(11) FILL_WORD(12) FILL_WORD(13) FILL_WORD(14) FILL_WORD(15)
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

control IntEgress(inout headers_t hdr,
                  inout local_metadata_t meta,
                  inout standard_metadata_t std_meta) {
    register<bit<32>>(PORT_COUNT) int_tx_bytes;   // bytes sent per port, mod 2^32
    register<bit<32>>(1) report_seq_no;           // next report sequence number (hw_id 0)

    bit<32> node_id = 0;
    bit<1>  sink = 0;
    bit<16> mtu = INT_DEFAULT_MTU;
    bit<32> link_rate_mbps = 0;
    bit<32> tx_bytes = 0;
    IntFill() fill;

    action set_int_port(bit<32> switch_id, bit<1> is_sink, bit<16> port_mtu, bit<32> port_rate_mbps) {
        node_id = switch_id;
        sink = is_sink;
        mtu = port_mtu;
        link_rate_mbps = port_rate_mbps;
        int_tx_bytes.read(tx_bytes, (bit<32>) std_meta.egress_port);
        tx_bytes = tx_bytes + std_meta.packet_length;
        int_tx_bytes.write((bit<32>) std_meta.egress_port, tx_bytes);
    }

    // ---- transit: push this hop (INT v2.1 section 5.7) ---------------------

    action push_done(bit<16> hop_bytes) {
        hdr.int_md.remaining_hop_cnt = hdr.int_md.remaining_hop_cnt - 1;
        hdr.int_shim.len = hdr.int_shim.len + (bit<8>) hdr.int_md.hop_ml;
        hdr.ipv4.total_len = hdr.ipv4.total_len + hop_bytes;
        hdr.udp.length = hdr.udp.length + hop_bytes;    // no effect on TCP packets (udp invalid)
        meta.telemetry.l4_checksum = true;
    }

    // ---- sink: keep what the report needs, clone, strip -------------------

    action save_for_report() {
        meta.report.ingress_port = (bit<16>) std_meta.ingress_port;
        meta.report.egress_port = (bit<16>) std_meta.egress_port;
        meta.report.hop_latency = (bit<32>) (std_meta.egress_global_timestamp - std_meta.ingress_global_timestamp);
        meta.report.queue_occupancy = (bit<24>) std_meta.enq_qdepth;
        meta.report.ingress_ts = (bit<64>) std_meta.ingress_global_timestamp;
        meta.report.egress_ts = (bit<64>) std_meta.egress_global_timestamp;
        meta.report.tx_bytes = tx_bytes;
        meta.report.link_rate_mbps = link_rate_mbps;
        meta.report.ipv4_total_len = hdr.ipv4.total_len;
        meta.report.ipv4_dscp = hdr.ipv4.dscp;
        meta.report.ipv4_checksum = hdr.ipv4.hdr_checksum;
        meta.report.l4_dst_port = hdr.udp.dst_port;
        meta.report.udp_length = hdr.udp.length;
        meta.report.l4_checksum = hdr.udp.checksum;     // TCP: replaced in apply
        meta.report.shim = hdr.int_shim.int_type ++ hdr.int_shim.npt ++ hdr.int_shim.rsvd
                           ++ hdr.int_shim.len ++ hdr.int_shim.npt_field;
        meta.report.md_header = hdr.int_md.ver ++ hdr.int_md.d ++ hdr.int_md.e ++ hdr.int_md.m
                                ++ hdr.int_md.rsvd ++ hdr.int_md.hop_ml ++ hdr.int_md.remaining_hop_cnt
                                ++ hdr.int_md.instruction_bitmap ++ hdr.int_md.ds_id
                                ++ hdr.int_md.ds_instruction ++ hdr.int_md.ds_flags;
        SAVE_8_WORDS(stack0, 0) SAVE_8_WORDS(stack1, 8) SAVE_8_WORDS(stack2, 16) SAVE_8_WORDS(stack3, 24)
        SAVE_8_WORDS(stack4, 32) SAVE_8_WORDS(stack5, 40) SAVE_8_WORDS(stack6, 48) SAVE_8_WORDS(stack7, 56)
        // IPv4 header + L4 header + shim + MD header + stack
        meta.report.inner_bytes = ((bit<16>) hdr.ipv4.ihl << 2) + 8 + 4 + ((bit<16>) hdr.int_shim.len << 2);
        meta.report.dropped = 0;
        meta.report.congested = 0;
        clone_preserving_field_list(CloneType.E2E, REPORT_MIRROR_SESSION, INT_REPORT_FIELDS);
    }

    action strip_int() {
        bit<16> int_bytes = 4 + ((bit<16>) hdr.int_shim.len << 2);
        hdr.ipv4.total_len = hdr.ipv4.total_len - int_bytes;
        hdr.udp.length = hdr.udp.length - int_bytes;    // no effect on TCP packets (udp invalid)
        hdr.int_shim.setInvalid();
        hdr.int_md.setInvalid();
        hdr.int_stack.pop_front(INT_MAX_STACK_WORDS);
        meta.telemetry.l4_checksum = true;
    }

    // ---- report clone: Telemetry Report v2.0 around the kept packet --------

    action build_report(mac_addr_t src_mac, mac_addr_t dst_mac, ipv4_addr_t src_addr,
                        ipv4_addr_t collector_addr, bit<16> collector_port, bit<32> switch_id) {
        // The reported packet, as the sink received it.
        hdr.inner_ipv4 = hdr.ipv4;
        hdr.inner_ipv4.total_len = meta.report.ipv4_total_len;
        hdr.inner_ipv4.dscp = meta.report.ipv4_dscp;
        hdr.inner_ipv4.hdr_checksum = meta.report.ipv4_checksum;
        hdr.inner_ipv4.ttl = hdr.ipv4.ttl + 1;      // ingress decremented it
        hdr.inner_udp = hdr.udp;                   // one of inner_udp / inner_tcp ends up valid
        hdr.inner_udp.dst_port = meta.report.l4_dst_port;
        hdr.inner_udp.length = meta.report.udp_length;
        hdr.inner_udp.checksum = meta.report.l4_checksum;
        hdr.inner_tcp = hdr.tcp;
        hdr.inner_tcp.checksum = meta.report.l4_checksum;
        hdr.inner_tcp_options = hdr.tcp_options;
        hdr.int_shim.setValid();
        hdr.int_shim.int_type = meta.report.shim[31:28];
        hdr.int_shim.npt = meta.report.shim[27:26];
        hdr.int_shim.rsvd = meta.report.shim[25:24];
        hdr.int_shim.len = meta.report.shim[23:16];
        hdr.int_shim.npt_field = meta.report.shim[15:0];
        hdr.int_md.setValid();
        hdr.int_md.ver = meta.report.md_header[95:92];
        hdr.int_md.d = meta.report.md_header[91:91];
        hdr.int_md.e = meta.report.md_header[90:90];
        hdr.int_md.m = meta.report.md_header[89:89];
        hdr.int_md.rsvd = meta.report.md_header[88:77];
        hdr.int_md.hop_ml = meta.report.md_header[76:72];
        hdr.int_md.remaining_hop_cnt = meta.report.md_header[71:64];
        hdr.int_md.instruction_bitmap = meta.report.md_header[63:48];
        hdr.int_md.ds_id = meta.report.md_header[47:32];
        hdr.int_md.ds_instruction = meta.report.md_header[31:16];
        hdr.int_md.ds_flags = meta.report.md_header[15:0];
        // all 64 words; truncate() below cuts what the stack did not hold
        RESTORE_8_WORDS(stack0, 0) RESTORE_8_WORDS(stack1, 8) RESTORE_8_WORDS(stack2, 16)
        RESTORE_8_WORDS(stack3, 24) RESTORE_8_WORDS(stack4, 32) RESTORE_8_WORDS(stack5, 40)
        RESTORE_8_WORDS(stack6, 48) RESTORE_8_WORDS(stack7, 56)

        // The report: outer Ethernet/IPv4/UDP reuse the packet's own headers.
        bit<16> report_bytes = REPORT_HEADERS_BYTES + REPORT_MD_BYTES + meta.report.inner_bytes;
        hdr.tcp.setInvalid();
        hdr.tcp_options.setInvalid();
        hdr.ethernet.src_addr = src_mac;
        hdr.ethernet.dst_addr = dst_mac;
        hdr.ethernet.ether_type = ETHERTYPE_IPV4;
        hdr.ipv4.version = 4;
        hdr.ipv4.ihl = 5;
        hdr.ipv4.dscp = 0;
        hdr.ipv4.ecn = 0;
        hdr.ipv4.total_len = report_bytes - 14;
        hdr.ipv4.identification = 0;
        hdr.ipv4.flags = 2;                         // DF (Telemetry Report v2.0)
        hdr.ipv4.frag_offset = 0;
        hdr.ipv4.ttl = 64;
        hdr.ipv4.protocol = IP_PROTO_UDP;
        hdr.ipv4.src_addr = src_addr;
        hdr.ipv4.dst_addr = collector_addr;
        hdr.udp.setValid();
        hdr.udp.src_port = REPORT_UDP_PORT;
        hdr.udp.dst_port = collector_port;
        hdr.udp.length = report_bytes - 14 - 20;
        hdr.udp.checksum = 0;

        bit<32> seq_no;
        report_seq_no.read(seq_no, 0);
        report_seq_no.write(0, (seq_no + 1) & 0x3FFFFF);
        hdr.report_group.setValid();
        hdr.report_group.ver = REPORT_VERSION;
        hdr.report_group.hw_id = 0;
        hdr.report_group.seq_no = seq_no[21:0];
        hdr.report_group.node_id = switch_id;
        hdr.report_individual.setValid();
        hdr.report_individual.rep_type = 1;         // INT
        hdr.report_individual.in_type = 4;          // IPv4
        hdr.report_individual.report_length = (bit<8>) ((8 + REPORT_MD_BYTES + meta.report.inner_bytes) >> 2);
        hdr.report_individual.md_length = REPORT_MD_WORDS;
        hdr.report_individual.d = meta.report.dropped;
        hdr.report_individual.q = meta.report.congested;
        hdr.report_individual.f = 1;
        hdr.report_individual.i = 0;
        hdr.report_individual.rsvd = 0;
        hdr.report_main.setValid();
        hdr.report_main.rep_md_bits = REPORT_MD_BITS;
        hdr.report_main.ds_id = FABRIC_DS_ID;
        hdr.report_main.ds_md_bits = REPORT_DS_MD_BITS;
        hdr.report_main.ds_md_status = 0;
        hdr.report_l1_ports.setValid();
        hdr.report_l1_ports.ingress_port = meta.report.ingress_port;
        hdr.report_l1_ports.egress_port = meta.report.egress_port;
        hdr.report_hop_latency.setValid();
        hdr.report_hop_latency.hop_latency = meta.report.hop_latency;
        hdr.report_queue.setValid();
        hdr.report_queue.queue_id = 0;
        hdr.report_queue.occupancy = meta.report.queue_occupancy;
        hdr.report_ingress_ts.setValid();
        hdr.report_ingress_ts.timestamp = meta.report.ingress_ts;
        hdr.report_egress_ts.setValid();
        hdr.report_egress_ts.timestamp = meta.report.egress_ts;
        hdr.report_ds_tx_bytes.setValid();
        hdr.report_ds_tx_bytes.data = meta.report.tx_bytes;
        hdr.report_ds_tx_time.setValid();
        hdr.report_ds_tx_time.data = meta.report.egress_ts[31:0];
        hdr.report_ds_link_rate.setValid();
        hdr.report_ds_link_rate.data = meta.report.link_rate_mbps;
        truncate((bit<32>) report_bytes);
    }

    table int_port {
        key = {
            std_meta.egress_port:   exact;
            std_meta.instance_type: exact;
        }
        actions = {
            set_int_port;
            build_report;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = 2 * PORT_COUNT;
    }

    apply {
        switch (int_port.apply().action_run) {
            set_int_port: {
                if (hdr.int_md.isValid() && sink == 1) {
                    save_for_report();
                    if (hdr.tcp.isValid()) {
                        meta.report.l4_checksum = hdr.tcp.checksum;
                        meta.report.inner_bytes = meta.report.inner_bytes + ((bit<16>) hdr.tcp.data_offset << 2) - 8;
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
                } else if (hdr.int_md.isValid()) {
                    if (hdr.int_md.remaining_hop_cnt == 0) {
                        hdr.int_md.e = 1;
                    } else if (hdr.ipv4.total_len + ((bit<16>) hdr.int_md.hop_ml << 2) > mtu
                               || hdr.int_shim.len - INT_HEADER_WORDS + (bit<8>) hdr.int_md.hop_ml
                                  > INT_MAX_STACK_WORDS_C) {
                        hdr.int_md.m = 1;
                    } else {
                        bit<16> bitmap = hdr.int_md.instruction_bitmap;
                        if (bitmap[15:15] == 1) {
                            hdr.int_node_id.setValid();
                            hdr.int_node_id.node_id = node_id;
                        }
                        if (bitmap[14:14] == 1) {
                            hdr.int_l1_ports.setValid();
                            hdr.int_l1_ports.ingress_port = (bit<16>) std_meta.ingress_port;
                            hdr.int_l1_ports.egress_port = (bit<16>) std_meta.egress_port;
                        }
                        if (bitmap[13:13] == 1) {
                            hdr.int_hop_latency.setValid();
                            hdr.int_hop_latency.hop_latency =
                                (bit<32>) (std_meta.egress_global_timestamp - std_meta.ingress_global_timestamp);
                        }
                        if (bitmap[12:12] == 1) {
                            hdr.int_queue.setValid();
                            hdr.int_queue.queue_id = 0;
                            hdr.int_queue.occupancy = (bit<24>) std_meta.enq_qdepth;
                        }
                        if (bitmap[11:11] == 1) {
                            hdr.int_ingress_ts.setValid();
                            hdr.int_ingress_ts.timestamp = (bit<64>) std_meta.ingress_global_timestamp;
                        }
                        if (bitmap[10:10] == 1) {
                            hdr.int_egress_ts.setValid();
                            hdr.int_egress_ts.timestamp = (bit<64>) std_meta.egress_global_timestamp;
                        }
                        if (meta.telemetry.fill_words != 0) {
                            fill.apply(hdr, meta);
                        }
                        if (hdr.int_md.ds_id == FABRIC_DS_ID) {
                            bit<16> ds = hdr.int_md.ds_instruction;
                            if (ds[15:15] == 1) {
                                hdr.int_ds_tx_bytes.setValid();
                                hdr.int_ds_tx_bytes.data = tx_bytes;
                            }
                            if (ds[14:14] == 1) {
                                hdr.int_ds_tx_time.setValid();
                                hdr.int_ds_tx_time.data = (bit<32>) std_meta.egress_global_timestamp;
                            }
                            if (ds[13:13] == 1) {
                                hdr.int_ds_link_rate.setValid();
                                hdr.int_ds_link_rate.data = link_rate_mbps;
                            }
                        }
                        if (bitmap[0:0] == 1) {
                            hdr.int_checksum_fill.setValid();
                            hdr.int_checksum_fill.data = 0xFFFFFFFF;
                        }
                        push_done((bit<16>) hdr.int_md.hop_ml << 2);
                    }
                }
                meta.telemetry.l4_length = hdr.ipv4.total_len - ((bit<16>) hdr.ipv4.ihl << 2);
            }
            build_report: {
            }
        }
    }
}

#endif
