// Source routing of INT probes (INT-path style): a probe carries the egress
// port of every switch on its path; each switch sends it out of the first
// entry's port and pops the entry; after the last one (bos) the probe is a
// plain IPv4 packet again. Probes carry INT from their host, so every hop
// pushes its metadata and the last switch's host port reports the path.
// The controller never writes anything here: paths come with the packets
// (telemetry/probe_planner.py plans them to cover every link).
#ifndef SOURCE_ROUTING_P4
#define SOURCE_ROUTING_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

control SourceRouting(inout headers_t hdr, inout standard_metadata_t std_meta) {
    apply {
        std_meta.egress_spec = (port_t) hdr.source_route[0].port;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
        if (hdr.source_route[0].bos == 1) {
            hdr.ethernet.ether_type = ETHERTYPE_IPV4;
        }
        hdr.source_route.pop_front(1);
    }
}

#endif
