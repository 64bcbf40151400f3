// Fast failover in the data plane: a switch stops sending to a neighbour it
// no longer hears from, without waiting for the controller.
//
// Liveness: a heartbeat (a source-routed packet to UDP HEARTBEAT_UDP_PORT,
// from hostagent/failover/heartbeat.py) that arrives on a port proves the link and
// the neighbour behind it work; SourceRouting writes the time into
// port_heard[port]. A
// port heard from, then silent for longer than the timeout (failover_config,
// set at runtime), is dead. A port never heard from is not monitored (so a
// switch starts forwarding before its first heartbeat). Detection takes at
// most timeout + one heartbeat period.
//
// Remote failures: a port can be heard while a link behind the neighbour
// is dead (leaf1 hears spine1, but spine1's only way down to leaf2 is
// gone). Path heartbeats, one per (edge switch A, A's neighbour N, edge
// switch B), go from A through N to B and back the same way, carrying B's
// index (UDP source port HEARTBEAT_ORIGIN_PORT_BASE + B); A, hearing one
// return from N, writes path_heard[port from N][B]: the round trip works.
// Where failover_destination names a packet's destination edge switch, a
// member is also dead when its path to that edge switch, heard before,
// went silent: leaf1 stops sending leaf2's traffic to spine1 by itself.
//
// Failover: a packet routed to an ECMP group whose slot's next hop is dead
// takes the slot's backup (next_hop_backup, the next slot's member on
// another port, precomputed by the controller): only the flows of the dead
// member move, each to one backup, and they come back when the port (path)
// is heard from again. A dead backup, or none, leaves no live member: the
// packet is dropped as DROP_NO_LIVE_MEMBER, never sent to a dead port.
//
// Why not P4Runtime watch_port: BMv2 implements it for action-selector
// members, and then spreads a dead member's flows over the live members by
// hash % live, which moves the flows of healthy members too; the fabric's
// groups are slot tables (forwarding.p4), and the backup per slot keeps
// every healthy flow where it was. BMv2 also learns a port is down only from
// its interface state, polled every 200 ms: a neighbour that died, or a link
// that black-holes, is not a port going down.
#ifndef FAILOVER_P4
#define FAILOVER_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

// When each port last heard from its neighbour (us, BMv2's clock; 0: never).
register<bit<48>, port_t>(PORT_COUNT) port_heard;
// When each port last heard a path heartbeat from each edge switch.
register<bit<48>, bit<32>>(PORT_COUNT * FAILOVER_ORIGINS) path_heard;

// The index of (port, edge switch) in path_heard.
#define FAILOVER_PATH_INDEX(port, origin) (((port) << FAILOVER_ORIGIN_BITS) | (origin))

// Heard before, and not for longer than the timeout.
#define FAILOVER_SILENT(last, f) ((last) != 0 && (f).now - (last) > (f).timeout)

control Failover(inout headers_t hdr,
                 inout local_metadata_t meta,
                 inout standard_metadata_t std_meta) {
    direct_counter(CounterType.packets) backup_packets;     // per (group, slot): packets sent to the backup

    action watch(bit<48> timeout_us) {
        meta.failover.setValid();
        meta.failover.timeout = timeout_us;
        meta.failover.now = std_meta.ingress_global_timestamp;
        meta.failover.edge = 0;
        meta.failover.by_path = 0;
    }
    // Keyless: its default action switches failover on (watch) or off (NoAction).
    table failover_config {
        key = { }
        actions = { watch; NoAction; }
        default_action = NoAction();
        size = 1;
    }

    action backup(port_t port, mac_addr_t src_mac, mac_addr_t dst_mac) {
        std_meta.egress_spec = port;
        hdr.ethernet.src_addr = src_mac;
        hdr.ethernet.dst_addr = dst_mac;
    }
    table next_hop_backup {
        key = {
            meta.next_id:   exact;
            meta.ecmp_slot: exact;
        }
        actions = { backup; @defaultonly NoAction; }
        default_action = NoAction();
        counters = backup_packets;
        size = NEXT_HOP_TABLE_SIZE;
    }

    // The edge switch a destination sits behind (its paths are watched).
    action toward(bit<32> origin) {
        meta.failover.edge = origin;
        meta.failover.by_path = 1;
    }
    table failover_destination {
        key = { hdr.ipv4.dst_addr: lpm; }
        actions = { toward; @defaultonly NoAction; }
        default_action = NoAction();
        size = IPV4_LPM_TABLE_SIZE;
    }

    // When the chosen port, and its path to the destination's edge switch, were
    // last heard. (Indexes are computed in an action of their own: p4c would
    // otherwise substitute the expression into the read and add a temporary.)
    action index_liveness() {
        meta.failover.path = FAILOVER_PATH_INDEX((bit<32>) std_meta.egress_spec, meta.failover.edge);
    }
    action read_liveness() {
        port_heard.read(meta.failover.port_last, std_meta.egress_spec);
        path_heard.read(meta.failover.path_last, meta.failover.path);
    }

    action no_live_member() {
        meta.drop_reason = DROP_NO_LIVE_MEMBER;
    }

    // Applied after next_hop chose the packet's port (TTL and MACs done).
    // (A keyless table's default action is a miss: branch on the action.)
    apply {
        switch (failover_config.apply().action_run) {
            watch: {
                failover_destination.apply();
                index_liveness();
                read_liveness();
                if (FAILOVER_SILENT(meta.failover.port_last, meta.failover)
                        || (meta.failover.by_path == 1 && FAILOVER_SILENT(meta.failover.path_last, meta.failover))) {
                    if (next_hop_backup.apply().hit) {
                        index_liveness();
                        read_liveness();
                        if (FAILOVER_SILENT(meta.failover.port_last, meta.failover)
                                || (meta.failover.by_path == 1
                                    && FAILOVER_SILENT(meta.failover.path_last, meta.failover))) {
                            no_live_member();
                        }
                    } else {
                        no_live_member();
                    }
                }
                meta.failover.setInvalid();     // headers.p4: out of the packet length
            }
        }
    }
}

#endif
