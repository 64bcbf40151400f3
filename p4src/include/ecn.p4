// ECN marking at egress, as the switch side of DCQCN does it.
//
// A packet's queue depth at enqueue (enq_qdepth, in packets: its own
// priority queue's) is compared with the profile of its egress port and
// queue (a traffic class's, lossless.p4), set at runtime in ecn_profile:
//   mark_step(k):                 mark when depth >= k
//   mark_wred(kmin, kmax, pmax):  no mark below kmin; between kmin and kmax
//                                 mark with probability pmax * (depth - kmin) / (kmax - kmin);
//                                 always mark at or above kmax (pmax in ppm)
// Only ECN-capable packets (ECT(0), ECT(1)) are marked; Not-ECT packets are
// left to tail drop, CE stays CE. The IPv4 checksum is recomputed after
// egress (checksums.p4).
// A (port, queue) without an entry costs one table miss and no comparison.
// The depth itself is recorded for every queue whether it marks or not
// (queue_depth.p4).
#ifndef ECN_P4
#define ECN_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

control EcnMarking(inout headers_t hdr, inout local_metadata_t meta, in standard_metadata_t std_meta) {
    counter<port_t>(PORT_COUNT, CounterType.packets) ecn_marked_counter;

    // The matched profile is copied out of the action into meta.ecn for the apply block.
    action mark_step(qdepth_t k) {
        meta.ecn.setValid();
        meta.ecn.kmin = k;
    }

    action mark_wred(qdepth_t wred_kmin, qdepth_t wred_kmax, bit<32> wred_pmax_ppm) {
        meta.ecn.setValid();
        meta.ecn.kmin = wred_kmin;
        meta.ecn.kmax = wred_kmax;
        meta.ecn.pmax_ppm = wred_pmax_ppm;
    }

    table ecn_profile {
        key = {
            std_meta.egress_port: exact;
            std_meta.priority: exact;       // the queue: per-class profiles
        }
        actions = {
            mark_step;
            mark_wred;
            NoAction;
        }
        default_action = NoAction();
        size = PORT_COUNT * 8;
    }

    action mark() {
        hdr.ipv4.ecn = ECN_CE;
        ecn_marked_counter.count(std_meta.egress_port);
    }

    apply {
        // Non-IPv4 never reaches egress (ingress drops it): hdr.ipv4 is valid here.
        switch (ecn_profile.apply().action_run) {
            mark_step: {
                if ((hdr.ipv4.ecn == ECN_ECT0 || hdr.ipv4.ecn == ECN_ECT1) && std_meta.enq_qdepth >= meta.ecn.kmin) {
                    mark();
                }
            }
            mark_wred: {
                if (hdr.ipv4.ecn == ECN_ECT0 || hdr.ipv4.ecn == ECN_ECT1) {
                    if (std_meta.enq_qdepth >= meta.ecn.kmax) {
                        mark();
                    } else if (std_meta.enq_qdepth >= meta.ecn.kmin) {
                        // P(mark) = pmax * (q - kmin) / (kmax - kmin), without division:
                        // mark if r * (kmax - kmin) < pmax * (q - kmin), r uniform in [0, 1e6).
                        random(meta.ecn.r, 0, PROBABILITY_SCALE - 1);
                        if ((bit<64>) meta.ecn.r * (bit<64>) (meta.ecn.kmax - meta.ecn.kmin)
                                < (bit<64>) meta.ecn.pmax_ppm * (bit<64>) (std_meta.enq_qdepth - meta.ecn.kmin)) {
                            mark();
                        }
                    }
                }
            }
        }
    }
}

#endif
