// The fabric switch: a v1model pipeline composed of one control per concern.
// Features (ECN marking, INT, flowlets, aggregation) plug in as controls
// applied below; each lives in its own include/ file.
#include <core.p4>
#define V1MODEL_VERSION 20200408   // typed register and counter indexes
#include <v1model.p4>

#include "include/defines.p4"
#include "include/headers.p4"
#include "include/parser.p4"
#include "include/checksums.p4"
#include "include/counters.p4"
#include "include/forwarding.p4"
#include "include/ecn.p4"
#include "include/int_telemetry_source.p4"
#include "include/int_telemetry_egress.p4"
#include "include/int_telemetry_drop_report.p4"
#include "include/source_routing.p4"
#include "include/aggregation.p4"

control FabricIngress(inout headers_t hdr,
                      inout local_metadata_t meta,
                      inout standard_metadata_t std_meta) {
    IngressPortCounter() port_counter;
    Forwarding() forwarding;
    IntSource() int_source;
    SourceRouting() source_routing;
    DropAccounting() drops;
    IntDropReport() drop_report;
    Aggregation() aggregation;

    // A packet that cannot be forwarded gets a drop reason (defines.p4) and
    // is counted and dropped by DropAccounting. The good path evaluates one
    // condition: BMv2 interprets each one, and on its default build formats
    // a log line for it even with logging off.
    apply {
        port_counter.apply(std_meta);
        if (std_meta.parser_error == error.NoError && std_meta.checksum_error == 0
                && hdr.ipv4.isValid() && hdr.ipv4.ttl > 1 && !hdr.source_route.isValid()) {
            forwarding.apply(hdr, meta, std_meta);
            if (hdr.agg.isValid()) {
                aggregation.apply(hdr, meta, std_meta);   // to a parameter server: maybe summed here
            } else {
                int_source.apply(hdr, meta, std_meta);
            }
        } else if (std_meta.parser_error == error.NoError && std_meta.checksum_error == 0
                   && hdr.ipv4.isValid() && hdr.ipv4.ttl > 1) {
            source_routing.apply(hdr, meta, std_meta);  // an INT probe
        } else if (std_meta.parser_error == error.IntMalformed
                   || (std_meta.parser_error != error.NoError && hdr.int_shim.isValid())) {
            meta.drop_reason = DROP_INT_MALFORMED;     // a parser error inside INT headers
        } else if (std_meta.parser_error != error.NoError && hdr.agg.isValid()) {
            meta.drop_reason = DROP_AGG_BAD_LENGTH;    // fewer than AGG_ELEMENTS elements
        } else if (std_meta.parser_error != error.NoError) {
            meta.drop_reason = DROP_PARSER_ERROR;
        } else if (std_meta.checksum_error == 1) {
            meta.drop_reason = DROP_BAD_IPV4_CHECKSUM;
        } else if (!hdr.ipv4.isValid()) {
            meta.drop_reason = DROP_NOT_IPV4;
        } else {
            meta.drop_reason = DROP_TTL_EXPIRED;
        }
        if (meta.drop_reason != DROP_NONE) {
            drops.apply(meta, std_meta);
            drop_report.apply(meta, std_meta);
        }
    }
}

control FabricEgress(inout headers_t hdr,
                     inout local_metadata_t meta,
                     inout standard_metadata_t std_meta) {
    EgressPortCounter() port_counter;
    IntEgress() int_egress;
    EcnMarking() ecn;
    LoadRecorder() load_recorder;
    AggregationEgress() aggregation;

    // INT before ECN: a report clone's IPv4 header is the report's own by
    // the time ECN looks at it (the reported packet is left as received).
    // Features that need egress only for some packets share one condition.
    apply {
        port_counter.apply(std_meta);
        if (meta.telemetry.enabled == 1 || meta.lb_record_load == 1 || meta.agg_result == 1) {
            if (meta.agg_result == 1) {
                aggregation.apply(hdr, std_meta);     // a result replica: to its worker
            } else {
                if (meta.telemetry.enabled == 1) {
                    int_egress.apply(hdr, meta, std_meta);
                }
                load_recorder.apply(meta, std_meta);
            }
        }
        ecn.apply(hdr, meta, std_meta);
    }
}

V1Switch(FabricParser(),
         VerifyIpv4Checksum(),
         FabricIngress(),
         FabricEgress(),
         ComputeIpv4Checksum(),
         FabricDeparser()) main;
