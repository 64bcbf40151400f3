// Packet trimming (Ultra Ethernet 1.0's network layer; NDP, SIGCOMM'17,
// before it): a packet that would join a congested queue is cut to its
// headers instead of being dropped, marked with a DSCP that says so, and
// sent in a higher-priority queue that is never trimmed. The receiver sees
// at once which packet is missing and asks for it again (a NACK), with no
// timeout. What the switch does and why: docs/features/trimming.md.
//
// Per egress (port, queue), set at runtime in trim_queue:
//   trim_above(threshold, header_queue, trimmed_dscp, trim_bytes)
// A packet bound for that queue while it holds `threshold` packets or more
// leaves as its first `trim_bytes` bytes (v1model truncate), IPv4 total
// length and UDP length saying so (the UDP checksum zeroed: the payload it
// covered is gone), DSCP `trimmed_dscp`, in priority queue `header_queue`.
// A packet no longer than trim_bytes has nothing to cut: it joins its
// queue (and BMv2 drops it if the queue is full). So does a packet that is
// not UDP: the transports that read a trimmed header (UET, RoCEv2) run
// over UDP, and a TCP segment cut to 64 bytes is no header its receiver can
// use; one cut inside its options fails the next hop's parser (fabric
// train's UET ranks beside gloo's TCP in one queue: 2-31 PARSER_ERROR drops
// a run, 2026-12-01). A packet that arrives
// already marked `trimmed_dscp` goes to the header queue too: a header
// trimmed upstream keeps its priority on every hop where trimming is on.
// A (port, queue) without an entry costs one table miss.
//
// The queue's depth, as ingress must know it: BMv2 decides the queue at the
// end of ingress and tells its depth only in egress (enq_qdepth), too late
// to cut the packet that would overflow it; the depth a queue's last
// departure recorded is stale by a whole burst (a burst that arrives within
// one packet time sees the depth before it). So the switch counts: ingress
// counts the packets it admits into a (queue, port) cell, egress counts
// those that leave it, and their difference is the queue's occupancy when
// the next packet arrives. Each register has one writer (ingress is one
// thread; a port's packets all leave through one of BMv2's egress threads),
// so no update is lost. Every unicast packet that hits an entry and is not
// trimmed is counted (multicast replicas are not); the control plane keeps the threshold below the queue's
// depth, so BMv2's traffic manager never drops a counted packet (which
// would leave it counted for good: docs/features/trimming.md).
#ifndef TRIMMING_P4
#define TRIMMING_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

// Cells: priority (3 bits) ++ port (9 bits), queue_depth.p4's layout.
const bit<32> TRIM_CELLS = PORT_COUNT * 8;
register<bit<32>, bit<32>>(TRIM_CELLS) trim_admitted;    // ingress: packets admitted into the cell's queue
register<bit<32>, bit<32>>(TRIM_CELLS) trim_departed;    // egress: of those, the packets that left it

control Trimming(inout headers_t hdr, inout local_metadata_t meta, inout standard_metadata_t std_meta) {
    counter<bit<32>>(TRIM_CELLS, CounterType.packets) trim_counter;   // packets trimmed, by the cell they would have joined

    // The entry's parameters, and the cell's counts read at once. `cell` is
    // the key's (queue ++ port, from the control plane): an index computed
    // here would be a temporary, and BMv2 zeroes every temporary of every
    // packet, trimming on or off (as it would a statement's in the apply
    // block: a concatenation, a register read, a table's hit).
    action trim_above(bit<32> threshold, bit<3> header_queue, bit<6> trimmed_dscp, bit<32> trim_bytes,
                      bit<32> cell) {
        meta.trim.setValid();
        meta.trim.threshold = threshold;
        meta.trim.header_queue = header_queue;
        meta.trim.dscp = trimmed_dscp;
        meta.trim.bytes = trim_bytes;
        meta.trim.cell = cell;
        trim_admitted.read(meta.trim.admitted, meta.trim.cell);
        trim_departed.read(meta.trim.departed, meta.trim.cell);
    }

    table trim_queue {
        key = {
            std_meta.egress_spec: exact;
            std_meta.priority: exact;       // the queue: a traffic class's (lossless.p4), 0 without classes
        }
        actions = {
            trim_above;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = PORT_COUNT * 8;
    }

    action to_header_queue() {
        std_meta.priority = meta.trim.header_queue;
    }

    action trim() {
        truncate(meta.trim.bytes);
        hdr.ipv4.dscp = meta.trim.dscp;
        hdr.ipv4.total_len = (bit<16>) meta.trim.bytes - ETHERNET_BYTES;
        hdr.udp.length = (bit<16>) meta.trim.bytes - ETHERNET_BYTES - IPV4_BYTES;
        hdr.udp.checksum = 0;
        std_meta.priority = meta.trim.header_queue;
        trim_counter.count(meta.trim.cell);
        meta.drop_reason = DROP_TRIMMED;        // for a drop report (main.p4); the packet is forwarded
    }

    action admit() {
        meta.trim.admitted = meta.trim.admitted + 1;      // then written: an expression written is a temporary
        trim_admitted.write(meta.trim.cell, meta.trim.admitted);
        meta.egress_work = meta.egress_work | EGRESS_TRIM_DEPARTURE;
    }

    apply {
        switch (trim_queue.apply().action_run) {
            trim_above: {
                if (hdr.ipv4.isValid() && hdr.ipv4.dscp == meta.trim.dscp) {
                    to_header_queue();                      // trimmed upstream: a header here too, never trimmed
                } else if (std_meta.mcast_grp == 0) {       // replicas would leave a cell more often than they joined
                    if (meta.trim.admitted - meta.trim.departed >= meta.trim.threshold
                            && std_meta.packet_length > meta.trim.bytes && hdr.udp.isValid()) {
                        trim();
                    } else {
                        admit();
                    }
                }
            }
        }
    }
}

// Egress, for a packet ingress counted into its cell (meta.trim.cell: its
// queue ++ port, as BMv2 queued it): it left the queue.
control TrimDeparture(inout local_metadata_t meta) {
    action depart() {
        trim_departed.read(meta.trim.departed, meta.trim.cell);
        meta.trim.departed = meta.trim.departed + 1;
        trim_departed.write(meta.trim.cell, meta.trim.departed);
    }

    apply {
        depart();
    }
}

#endif
