// The flow's 5-tuple in meta.flow (headers.p4, flow_key_t): what ECMP,
// non-minimal routing and INT hash or look up. A control, not an action:
// the L4 header is chosen by a branch on its validity, which BMv2 takes
// as one condition, and each action then copies its header's ports as they
// are. An action has no branch (no ?: in one: p4c 1.2.5 lowers it into
// jumps and a metadata temporary), so it had to select both headers' ports
// with validity masks: 26 expression operations on every packet keyed
// (docs/benchmark.md, "The flow key by a branch, not masks"). Three
// actions that each copy the addresses too, not one for them and one per
// protocol: BMv2 pays for every action it calls.
//
// Applied only where the key is not filled yet (`if (!meta.flow.isValid())`)
// but in forwarding, which comes first; validating the header zeroes the
// ports a packet without TCP or UDP leaves at 0.
#ifndef FLOW_KEY_P4
#define FLOW_KEY_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

control FlowKey(in headers_t hdr, inout local_metadata_t meta) {
    action udp_flow() {
        meta.flow.setValid();
        meta.flow.src_addr = hdr.ipv4.src_addr;
        meta.flow.dst_addr = hdr.ipv4.dst_addr;
        meta.flow.protocol = hdr.ipv4.protocol;
        meta.flow.l4_src_port = hdr.udp.src_port;
        meta.flow.l4_dst_port = hdr.udp.dst_port;
    }

    action tcp_flow() {
        meta.flow.setValid();
        meta.flow.src_addr = hdr.ipv4.src_addr;
        meta.flow.dst_addr = hdr.ipv4.dst_addr;
        meta.flow.protocol = hdr.ipv4.protocol;
        meta.flow.l4_src_port = hdr.tcp.src_port;
        meta.flow.l4_dst_port = hdr.tcp.dst_port;
    }

    action portless_flow() {
        meta.flow.setValid();
        meta.flow.src_addr = hdr.ipv4.src_addr;
        meta.flow.dst_addr = hdr.ipv4.dst_addr;
        meta.flow.protocol = hdr.ipv4.protocol;
        meta.flow.l4_src_port = 0;       // (zeroed by setValid unless the key was filled before)
        meta.flow.l4_dst_port = 0;
    }

    apply {
        if (hdr.udp.isValid()) {         // RoCEv2, aggregation, INT over UDP: the common case first
            udp_flow();
        } else if (hdr.tcp.isValid()) {
            tcp_flow();
        } else {
            portless_flow();
        }
    }
}

#endif
