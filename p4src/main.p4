// The fabric switch: a v1model pipeline composed of one control per concern.
// Features (ECN marking, INT, load balancing, aggregation, failover,
// lossless classes, non-minimal routing, trimming) plug in as controls
// applied below; each lives in its own include/ file.
#include <core.p4>
#define V1MODEL_VERSION 20200408   // typed register and counter indexes
#include <v1model.p4>

#include "include/defines.p4"
#include "include/headers.p4"
#include "include/parser.p4"
#include "include/checksums.p4"
#include "include/counters.p4"
#include "include/queue_depth.p4"
#include "include/forwarding.p4"
#include "include/source_routing.p4"
#ifndef WITHOUT_ECN
#include "include/ecn.p4"
#endif
#ifndef WITHOUT_INT_TELEMETRY
#include "include/int_telemetry_source.p4"
#include "include/int_telemetry_egress.p4"
#include "include/int_telemetry_drop_report.p4"
#endif
#ifndef WITHOUT_AGGREGATION
#include "include/aggregation.p4"
#endif
#ifndef WITHOUT_LOSSLESS
#include "include/lossless.p4"
#endif
#ifndef WITHOUT_NONMINIMAL_ROUTING
#include "include/nonminimal_routing.p4"
#endif
#ifndef WITHOUT_TRIMMING
#include "include/trimming.p4"
#endif

control FabricIngress(inout headers_t hdr,
                      inout local_metadata_t meta,
                      inout standard_metadata_t std_meta) {
    IngressPortCounter() port_counter;
    Forwarding() forwarding;
    SourceRouting() source_routing;
    DropAccounting() drops;
#ifndef WITHOUT_INT_TELEMETRY
    IntSource() int_source;
    IntDropReport() drop_report;
#endif
#ifndef WITHOUT_AGGREGATION
    Aggregation() aggregation;
#endif
#ifndef WITHOUT_LOSSLESS
    Lossless() lossless;
    PfcReceive() pfc_receive;
    PcpRemark() pcp_remark;
#endif
#ifndef WITHOUT_NONMINIMAL_ROUTING
    NonminimalRouting() nonminimal_routing;
#endif
#ifndef WITHOUT_TRIMMING
    Trimming() trimming;
#endif

    // A packet that cannot be forwarded gets a drop reason (defines.p4) and
    // is counted and dropped by DropAccounting. The good path evaluates one
    // condition: BMv2 interprets each one, and on its default build formats
    // a log line for it even with logging off.
    apply {
#ifndef WITHOUT_LOSSLESS
        if (meta.pfc_carry == 0)    // else a held lossless packet, recirculated: Lossless sends it to its hold queue
#endif
        {
            port_counter.apply(std_meta);
            if (std_meta.parser_error == error.NoError && std_meta.checksum_error == 0
                    && hdr.ipv4.isValid() && hdr.ipv4.ttl > 1 && !hdr.source_route.isValid()) {
                if (hdr.vlan.isValid()) {
#ifndef WITHOUT_LOSSLESS
                    pcp_remark.apply(hdr);                   // its PCP: a traffic class's DSCP
#endif
                    hdr.ethernet.ether_type = hdr.vlan.ether_type;   // routed ports: the tag ends here
                    hdr.vlan.setInvalid();
                }
                forwarding.apply(hdr, meta, std_meta);
#ifndef WITHOUT_AGGREGATION
                if (hdr.agg.isValid()) {
                    aggregation.apply(hdr, meta, std_meta);   // to a parameter server: maybe summed here
                    meta.agg.setInvalid();                    // headers.p4: out of the packet length
                } else
#endif
                {
#ifndef WITHOUT_NONMINIMAL_ROUTING
                    nonminimal_routing.apply(hdr, meta, std_meta);   // Valiant, UGAL: maybe toward an intermediate
#endif
#ifndef WITHOUT_INT_TELEMETRY
                    int_source.apply(hdr, meta, std_meta);
#endif
                }
            // Drops, the most common first: each condition costs a dropped packet ~360
            // instructions, and BMv2 evaluates every term of a condition (no short circuit).
            } else if (meta.drop_reason != DROP_NONE) {
                // the parser's own checks named it (parser.p4, reject_* states)
            } else if (std_meta.parser_error == error.NoError && hdr.ipv4.isValid()) {
                // IPv4 whole, not forwarded above: its checksum, its TTL, or else a source route
                if (std_meta.checksum_error == 1) {
                    meta.drop_reason = DROP_BAD_IPV4_CHECKSUM;
                } else if (hdr.ipv4.ttl <= 1) {
                    meta.drop_reason = DROP_TTL_EXPIRED;
                } else {
                    source_routing.apply(hdr, meta, std_meta);  // an INT probe or a heartbeat
                }
#ifndef WITHOUT_INT_TELEMETRY
            } else if (std_meta.parser_error != error.NoError && hdr.int_shim.isValid()) {
                meta.drop_reason = DROP_INT_MALFORMED;     // INT headers cut short
#endif
#ifndef WITHOUT_AGGREGATION
            } else if (std_meta.parser_error == error.PacketTooShort && hdr.udp.isValid()
                       && hdr.udp.dst_port & AGG_UDP_PORT_MASK == AGG_UDP_PORT_BASE) {
                meta.drop_reason = DROP_AGG_BAD_LENGTH;    // shorter than the header and one chunk
#endif
#ifndef WITHOUT_LOSSLESS
            } else if (hdr.ethernet.ether_type == ETHERTYPE_MAC_CONTROL) {
                if (std_meta.parser_error == error.NoError) {
                    pfc_receive.apply(hdr, meta, std_meta);   // a PFC frame: pause or resume classes
                } else {
                    meta.drop_reason = DROP_PFC_MALFORMED;
                }
#endif
            } else if (std_meta.parser_error != error.NoError) {
                meta.drop_reason = DROP_PARSER_ERROR;
            } else {
                meta.drop_reason = DROP_NOT_IPV4;
            }
        }
#ifndef WITHOUT_LOSSLESS
        lossless.apply(hdr, meta, std_meta);      // the traffic class, PFC's buffer model (one table miss when off)
#endif
        if (meta.drop_reason != DROP_NONE) {
            drops.apply(meta, std_meta);
#if !defined(WITHOUT_INT_TELEMETRY) && defined(WITHOUT_TRIMMING)
            drop_report.apply(meta, std_meta);
#endif
        }
#ifndef WITHOUT_TRIMMING
        else {
            trimming.apply(hdr, meta, std_meta);  // last: the queue is chosen (lossless's class); maybe cut to its headers
        }
#ifndef WITHOUT_INT_TELEMETRY
        // A drop's report, or a trim's (DROP_TRIMMED: not counted as a drop, the header
        // forwarded). One call site: BMv2 applies a table from one place only. The
        // second condition costs every packet ~460 instructions (callgrind, fast BMv2).
        if (meta.drop_reason != DROP_NONE) {
            drop_report.apply(meta, std_meta);
        }
#endif
#endif
    }
}

control FabricEgress(inout headers_t hdr,
                     inout local_metadata_t meta,
                     inout standard_metadata_t std_meta) {
    EgressPortCounter() port_counter;
#ifndef WITHOUT_QUEUE_DEPTH
    QueueDepthRecorder() queue_depth;     // not a feature: always on (WITHOUT_ only for make bench to price it)
#endif
#ifndef WITHOUT_INT_TELEMETRY
    IntEgress() int_egress;
    IntTxBytes() tx_bytes;                // applied at two places: no table in it
#endif
#ifndef WITHOUT_ECN
    EcnMarking() ecn;
#endif
#ifndef WITHOUT_LOAD_BALANCING
    LoadRecorder() load_recorder;
#endif
#ifndef WITHOUT_AGGREGATION
    AggregationEgress() aggregation;
#endif
#ifndef WITHOUT_LOSSLESS
    LosslessEgress() lossless;
#endif
#ifndef WITHOUT_TRIMMING
    TrimDeparture() trim_departure;
#endif

    // INT before ECN: a report clone's IPv4 header is the report's own by
    // the time ECN looks at it (the reported packet is left as received).
    // Features that need egress only for some packets share one condition.
    apply {
#ifndef WITHOUT_QUEUE_DEPTH
        queue_depth.apply(std_meta);              // every packet that left a queue: PFC frames, held and released ones too
#endif
#ifndef WITHOUT_LOSSLESS
        if (meta.pfc_carry != 0) {
            lossless.apply(hdr, meta, std_meta);  // a PFC frame to build; a lossless packet: send, hold or release
            if (meta.pfc_carry == PFC_CARRY_FRAME) {
                port_counter.apply(std_meta);     // a PFC frame leaves the port: counted as any frame is
            }
        }
        if (meta.pfc_carry < PFC_CARRY_HELD)      // else held, dropped or a frame: nothing more
#endif
        {
            port_counter.apply(std_meta);
            if (meta.egress_work != 0) {
#ifndef WITHOUT_INT_TELEMETRY
                if (meta.egress_work == EGRESS_INT_TX_BYTES) {   // INT on, none in the packet: the usual packet where INT is on
                    tx_bytes.apply(std_meta);
                } else
#endif
                {
                    if ((meta.egress_work & ~(EGRESS_INT | EGRESS_INT_TX_BYTES)) != 0) {   // not INT's work alone
#ifndef WITHOUT_AGGREGATION
                        if ((meta.egress_work & EGRESS_AGG_RESULT) != 0) {
                            aggregation.apply(hdr, std_meta);     // a result replica: to its worker
                        }
#endif
#ifndef WITHOUT_TRIMMING
                        if ((meta.egress_work & EGRESS_TRIM_DEPARTURE) != 0) {
                            trim_departure.apply(meta);       // before INT: a report clone keeps EGRESS_INT only
                        }
#endif
#ifndef WITHOUT_LOAD_BALANCING
                        if ((meta.egress_work & EGRESS_LB_LOAD) != 0) {
                            load_recorder.apply(std_meta);    // before INT: a report clone keeps EGRESS_INT only
                        }
#endif
                    }
#ifndef WITHOUT_INT_TELEMETRY
                    if ((meta.egress_work & EGRESS_INT) != 0) {
                        int_egress.apply(hdr, meta, std_meta);    // counts the bytes too
                    } else if ((meta.egress_work & EGRESS_INT_TX_BYTES) != 0) {
                        tx_bytes.apply(std_meta);
                    }
#endif
                }
            }
#ifndef WITHOUT_ECN
            ecn.apply(hdr, meta, std_meta);
#endif
        }
    }
}

V1Switch(FabricParser(),
         VerifyIpv4Checksum(),
         FabricIngress(),
         FabricEgress(),
         ComputeIpv4Checksum(),
         FabricDeparser()) main;
