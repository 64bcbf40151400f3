// Central routing: the paths a central controller assigned, ahead of ECMP.
//
// The controller (features/central_routing.py) takes a training job's
// traffic matrix (flows and their bytes), gives every flow one of its
// shortest paths so that the most loaded link carries as little as it can,
// and writes, on every switch of each path, the flow's exact key -> the port
// and MACs of the path's next hop. A packet routed to an ECMP group has been
// routed by its slot (next_hop, maybe a load-balancing mode, maybe
// failover's backup) before this control runs; a flow with an entry here
// leaves by its assigned port instead. The route already decremented the
// TTL, so pinned() rewrites only the port and the MACs.
//
// Key: IPv4 source and destination, protocol and L4 source port (RoCEv2:
// the UDP source port that tells a queue pair's flows apart); not the
// destination port, which INT rewrites after the first switch of a flow it
// watches (int_telemetry_egress.p4), so the same entry matches on every hop.
//
// Applied only to packets whose route is an ECMP group (forwarding.p4): a
// route with one next hop has nothing to choose. Off: one keyless table
// (NoAction), on those packets only; on: an exact lookup more.
#ifndef CENTRAL_ROUTING_P4
#define CENTRAL_ROUTING_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

control CentralRouting(inout headers_t hdr,
                       inout local_metadata_t meta,
                       inout standard_metadata_t std_meta) {
    direct_counter(CounterType.packets) central_packets;   // per flow entry: packets it pinned

    action central_on() {
    }

    table central_routing {
        key = { }
        actions = {
            central_on;
            NoAction;
        }
        default_action = NoAction();
        size = 1;
    }

    action pinned(port_t port, mac_addr_t src_mac, mac_addr_t dst_mac) {
        std_meta.egress_spec = port;
        hdr.ethernet.src_addr = src_mac;
        hdr.ethernet.dst_addr = dst_mac;
    }

    table central_route {
        key = {
            hdr.ipv4.src_addr: exact;
            hdr.ipv4.dst_addr: exact;
            hdr.ipv4.protocol: exact;
            meta.flow.l4_src_port: exact @name("meta.l4_src_port");   // forwarding filled meta.flow
        }
        actions = {
            pinned;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        counters = central_packets;
        size = CENTRAL_ROUTE_TABLE_SIZE;
    }

    apply {
        switch (central_routing.apply().action_run) {
            central_on: {
                central_route.apply();
            }
        }
    }
}

#endif
