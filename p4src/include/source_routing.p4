// Source routing of INT probes (INT-path style): a probe carries the egress
// port of every switch on its path and a count of them; each switch sends it
// out of the first entry's port and pops the entry; after the last one the
// probe is a plain IPv4 packet again. Probes carry INT from their host, so every hop
// pushes its metadata and the last switch's host port reports the path.
// The controller never writes anything here: paths come with the packets
// (core/probe_planner.py plans them to cover every link).
#ifndef SOURCE_ROUTING_P4
#define SOURCE_ROUTING_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"
#ifndef WITHOUT_FAILOVER
#include "failover.p4"
#endif

control SourceRouting(inout headers_t hdr, inout local_metadata_t meta, inout standard_metadata_t std_meta) {
#ifndef WITHOUT_FAILOVER
    // The path_heard cell of (this port, the heartbeat's far edge switch).
    action index_heartbeat_path() {
        meta.failover.setValid();
        meta.failover.path = FAILOVER_PATH_INDEX((bit<32>) std_meta.ingress_port,
                                                 (bit<32>) (hdr.udp.src_port - HEARTBEAT_ORIGIN_PORT_BASE));
    }
#endif

    apply {
#ifndef WITHOUT_FAILOVER
        // A heartbeat came in: the link and the neighbour behind it work
        // (failover.p4). Probes do not count: a port they make heard would
        // be declared dead once they stop.
        if (hdr.udp.isValid() && hdr.udp.dst_port == HEARTBEAT_UDP_PORT) {
            port_heard.write(std_meta.ingress_port, std_meta.ingress_global_timestamp);
            // A path heartbeat names the far edge switch of its round trip:
            // the path there and back through this port works (failover.p4).
            if (hdr.udp.src_port >= HEARTBEAT_ORIGIN_PORT_BASE
                    && (bit<32>) (hdr.udp.src_port - HEARTBEAT_ORIGIN_PORT_BASE) < FAILOVER_ORIGINS) {
                index_heartbeat_path();
                path_heard.write(meta.failover.path, std_meta.ingress_global_timestamp);
                meta.failover.setInvalid();     // headers.p4: out of the packet length
            }
        }
#endif
#ifndef WITHOUT_INT_TELEMETRY
        meta.egress_work = meta.egress_work | EGRESS_INT;    // egress pushes this hop wherever INT is configured (int_port)
#endif
        std_meta.egress_spec = (port_t) hdr.source_route_port.port;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
        hdr.source_route_port.setInvalid();                  // popped: the next entry comes first
        hdr.source_route.hops_left = hdr.source_route.hops_left - 1;
        if (hdr.source_route.hops_left == 0) {
            hdr.source_route.setInvalid();
            hdr.ethernet.ether_type = ETHERTYPE_IPV4;
        }
    }
}

#endif
