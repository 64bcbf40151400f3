// The depth of every egress queue, whatever features are on: each packet
// leaving a queue (PFC frames and lossless packets held or released by
// lossless.p4 included: with classes on, the hold queue is one of 1..7) records, in the cells of its (port, priority queue), the
// depth its queue had when it joined (enq_qdepth, in packets: its own
// priority queue's) and when it left (egress_global_timestamp, us since the
// switch started):
//
//     queue 0:       queue_depth[port], queue_time[port]
//     queues 1..7:   class_queue_depth[priority ++ port], class_queue_time[...]
//
// Queue 0 is the only one a fabric without traffic classes uses, so its
// packets pay two register writes of plain fields and no index arithmetic
// (a computed index is an expression BMv2 evaluates on bignums: writing
// every queue at priority ++ port cost 6.4k instructions a packet, this
// layout 2.6-3.6k; docs/telemetry.md). A cell whose time is 0 was never
// written: a reader tells "no packet yet" from "empty queue" (depth 0 at a
// time), and a queue no packet left since its last read from one that was
// measured again (its time moved). Read over BMv2 Thrift (PI serves no
// register reads) with emulator/queue_depth.py, by the switch exporter and
// the experiments.
#ifndef QUEUE_DEPTH_P4
#define QUEUE_DEPTH_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

const bit<32> CLASS_QUEUE_CELLS = PORT_COUNT * 8;    // 3-bit priority ++ 9-bit port

control QueueDepthRecorder(in standard_metadata_t std_meta) {
    register<qdepth_t, port_t>(PORT_COUNT) queue_depth;
    register<bit<48>, port_t>(PORT_COUNT) queue_time;
    register<qdepth_t, bit<12>>(CLASS_QUEUE_CELLS) class_queue_depth;
    register<bit<48>, bit<12>>(CLASS_QUEUE_CELLS) class_queue_time;

    apply {
        if (std_meta.priority == 0) {
            queue_depth.write(std_meta.egress_port, std_meta.enq_qdepth);
            queue_time.write(std_meta.egress_port, std_meta.egress_global_timestamp);
        } else {
            bit<12> cell = std_meta.priority ++ std_meta.egress_port;
            class_queue_depth.write(cell, std_meta.enq_qdepth);
            class_queue_time.write(cell, std_meta.egress_global_timestamp);
        }
    }
}

#endif
