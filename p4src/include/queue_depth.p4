// The depth of every egress queue, whatever features are on: each packet
// leaving a port records, in the cell of its (port, priority queue), the
// depth its queue had when it joined (enq_qdepth, in packets: its own
// priority queue's) and when it left (egress_global_timestamp, us since the
// switch started). One register write a packet, one cell per queue:
//
//     queue_depth[port ++ priority] = timestamp[44:0] ++ enq_qdepth
//
// so cell = port * 8 + queue, and a cell reads depth = value & (2^19 - 1),
// time = value >> 19 (emulator/queue_depth.py decodes it). A cell that was
// never written reads 0: a reader tells "no packet yet" (time 0) from
// "empty queue" (depth 0 at a time), and a queue no packet left since its
// last read has no new measurement (its time did not move). Read over
// BMv2 Thrift (PI serves no register reads), by the switch exporter and the
// experiments.
#ifndef QUEUE_DEPTH_P4
#define QUEUE_DEPTH_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

const bit<32> QUEUE_DEPTH_CELLS = PORT_COUNT * 8;    // 9-bit port ++ 3-bit priority

control QueueDepthRecorder(in standard_metadata_t std_meta) {
    register<bit<64>, bit<12>>(QUEUE_DEPTH_CELLS) queue_depth;
    apply {
        queue_depth.write(std_meta.egress_port ++ std_meta.priority,
                          std_meta.egress_global_timestamp[44:0] ++ std_meta.enq_qdepth);
    }
}

#endif
