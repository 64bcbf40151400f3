// Packet accounting: per-port packet/byte counters on both sides of the
// traffic manager, and the drop counter indexed by drop reason. All are
// indirect counters, readable over P4Runtime (CounterEntry). Indexed by the
// field itself (counter<port_t>): a cast index would cost a metadata temporary.
#ifndef COUNTERS_P4
#define COUNTERS_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

control IngressPortCounter(in standard_metadata_t std_meta) {
    counter<port_t>(PORT_COUNT, CounterType.packets_and_bytes) ingress_port_counter;
    apply {
        ingress_port_counter.count(std_meta.ingress_port);
    }
}

control EgressPortCounter(in standard_metadata_t std_meta) {
    counter<port_t>(PORT_COUNT, CounterType.packets_and_bytes) egress_port_counter;
    apply {
        egress_port_counter.count(std_meta.egress_port);
    }
}

// Drops a packet some control gave a drop reason (the caller checks), and counts why.
control DropAccounting(in local_metadata_t meta, inout standard_metadata_t std_meta) {
    counter<drop_reason_t>(DROP_REASON_COUNT, CounterType.packets) drop_counter;
    apply {
        drop_counter.count(meta.drop_reason);
        mark_to_drop(std_meta);
    }
}

#endif
