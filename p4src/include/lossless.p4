// Lossless traffic classes: DSCP (or a tag's PCP) -> class -> priority queue, PFC (IEEE
// 802.1Qbb) sent from a per-(ingress port, class) buffer model, PFC
// honoured by holding paused packets, and a PFC watchdog. What the switch
// does and why: docs/features/lossless.md.
//
// A tagged frame's PCP gives it the DSCP of a class (pcp_to_dscp) before
// the tag ends at this switch (the fabric's ports are routed): the class it
// was sent in then travels on in its DSCP.
//
// A (port, class) pair is a cell: port ++ class (9 bits; PFC runs on ports 0..63).
//
// Buffer model (BMv2 has no shared buffer): a lossless packet is admitted
// in ingress (pfc_occupancy[ingress port, class] + 1) and released when it
// leaves the switch (- 1). Admitted at or above XOFF, the switch sends a
// pause for the class out of the ingress port (an ingress clone turned into
// a PFC frame in egress), and keeps pausing until the cell drains below
// XON (802.1Qbb's XOFF state): the pause is sent again every refresh_us,
// between XON and XOFF too, and falling below XON on release sends a
// resume (time 0, an egress clone).
// At XOFF + headroom a lossless packet is dropped (DROP_LOSSLESS_HEADROOM,
// and pfc_headroom_dropped for its cell): the headroom was too small for
// what the upstream had in flight.
// XOFF, XON and the headroom are the class's (traffic_class), or an
// ingress port's own for the class (pfc_port_thresholds: a port whose link
// is faster, slower or longer than the others needs other values; fabric
// tune derives them per port).
//
// Pauses received: a PFC frame on a port with PFC on (pfc_port) sets
// pfc_paused_until[port, class] for each class it names; time 0 resumes.
// BMv2 has no way to stop a queue, so a lossless packet that reaches egress
// on a paused (port, class) is held: numbered (pfc_hold_tail) and
// recirculated into the port's hold queue (a rate-limited priority queue),
// and back in egress it leaves only when the class is no longer paused and
// it is the next one to leave (pfc_hold_head), so a class keeps its order;
// while packets are held, the class's new packets are held behind them.
//
// Class change (Tagger, CoNEXT'17): class_change moves a packet that
// arrived on port i in class c and leaves on port e to another lossless
// class (its queue here, its DSCP once it leaves), so that packets off the
// expected routes (a bounce, a ring's dateline) use other queues than
// those they came from and lossless queues cannot depend on each other in
// a cycle (PFC deadlock). The upstream is paused in the class a packet
// arrived in, the downstream pauses the one it leaves in.
//
// Times are BMv2's microsecond clock, compared as now >= then + interval:
// ingress and egress stamp the same registers, and a stamp may be a few
// microseconds later than the packet reading it.
//
// Watchdog (SONiC's semantics): a (port, class) paused with nothing sent
// for detect_us is in a storm (pfc_storm, counted); its action then: drop
// its packets and ignore pauses, forward (ignore pauses) or alert (nothing
// changes). Restored once no pause has arrived for restore_us.
#ifndef LOSSLESS_P4
#define LOSSLESS_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

// Per (port, class) cell; shared by ingress and egress, so declared outside both.
register<bit<32>, bit<32>>(PFC_CELLS) pfc_occupancy;      // ingress cell: lossless packets admitted, not yet sent
register<bit<32>, bit<32>>(PFC_CELLS) pfc_occupancy_peak; // ingress cell: the most it held, a refused packet
                                                          // included (what arrived after the pause: fabric tune)
register<bit<48>, bit<32>>(PFC_CELLS) pfc_xoff_sent;      // ingress cell: when the last pause went upstream (us); 0: not pausing
register<bit<48>, bit<32>>(PFC_CELLS) pfc_paused_until;   // egress cell: the peer paused it until (us)
register<bit<48>, bit<32>>(PFC_CELLS) pfc_paused_us;      // egress cell: time paused by the peer (us), up to its
                                                          // last PFC frame (a pause is counted as the next frame
                                                          // for the cell, a refresh or a resume, arrives)
register<bit<48>, bit<32>>(PFC_CELLS) pfc_last_frame;     // egress cell: when its last PFC frame arrived (us)
register<bit<48>, bit<32>>(PFC_CELLS) pfc_last_progress;  // egress cell: when a packet last left, or a pause began (us)
register<bit<48>, bit<32>>(PFC_CELLS) pfc_last_pause;     // egress cell: when a pause (time > 0) last arrived (us)
register<bit<48>, bit<32>>(PFC_CELLS) pfc_storm;          // egress cell: when the watchdog found a storm (us); 0: none
register<bit<32>, bit<32>>(PFC_CELLS) pfc_hold_tail;      // egress cell: packets held so far
register<bit<32>, bit<32>>(PFC_CELLS) pfc_hold_head;      // egress cell: held packets released so far
counter<bit<32>>(PFC_CELLS, CounterType.packets) pfc_headroom_dropped; // ingress cell: lossless packets refused beyond
                                                                       // XOFF + headroom (which cell's headroom was short)
counter<bit<32>>(PFC_CELLS, CounterType.packets) pfc_pause_sent;       // ingress cell: pause frames sent upstream
counter<bit<32>>(PFC_CELLS, CounterType.packets) pfc_resume_sent;      // ingress cell: resume frames (time 0) sent
counter<bit<32>>(PFC_CELLS, CounterType.packets) pfc_frames_received;  // egress cell: classes named by PFC frames received
counter<bit<32>>(PFC_CELLS, CounterType.packets) pfc_held;             // egress cell: packets held (paused, or behind held ones)
counter<bit<32>>(PFC_CELLS, CounterType.packets) pfc_storms_detected;  // egress cell: watchdog storms found
counter<bit<32>>(PFC_CELLS, CounterType.packets) pfc_storms_restored;  // egress cell: storms over
counter<bit<32>>(PFC_CELLS, CounterType.packets) pfc_storm_dropped;    // egress cell: packets the watchdog dropped

// Ingress, for a tagged frame: the DSCP of the class its PCP names (none:
// its own DSCP stays), read before the tag is removed.
control PcpRemark(inout headers_t hdr) {
    action remark(bit<6> dscp) {
        hdr.ipv4.dscp = dscp;
    }

    table pcp_to_dscp {
        key = {
            hdr.vlan.pcp: exact;
        }
        actions = {
            remark;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = 8;
    }

    apply {
        pcp_to_dscp.apply();
    }
}

// Ingress, for every packet (a dropped one is neither counted nor admitted):
// its traffic class, and the buffer model of lossless ones. A held packet coming back from recirculation only
// gets its class parameters again and its hold queue.
// meta.tc is made valid by traffic_class's actions; p4c cannot see that
// through the table, and would warn at every use below.
@noWarn("invalid_header")
control Lossless(in headers_t hdr, inout local_metadata_t meta, inout standard_metadata_t std_meta) {
    counter<bit<32>>(PFC_CELLS, CounterType.packets_and_bytes) class_packets;   // (egress port, class)

    action set_class(bit<8> tclass, bit<3> queue) {
        meta.tc.setValid();
        meta.tc.tclass = tclass;
        meta.tc.out_class = tclass;
        meta.tc.in_port = std_meta.ingress_port;
        std_meta.priority = queue;
    }

    action set_lossless_class(bit<8> tclass, bit<3> queue, bit<3> hold_queue, bit<32> xoff, bit<32> xon,
                              bit<32> headroom, bit<16> pause_quanta, bit<48> refresh_us,
                              bit<48> detect_us, bit<48> restore_us, bit<8> storm_action) {
        set_class(tclass, queue);
        meta.tc.lossless = 1;
        meta.tc.hold_queue = hold_queue;
        meta.tc.xoff = xoff;
        meta.tc.xon = xon;
        meta.tc.headroom = headroom;
        meta.tc.pause_quanta = pause_quanta;
        meta.tc.refresh_us = refresh_us;
        meta.tc.detect_us = detect_us;
        meta.tc.restore_us = restore_us;
        meta.tc.storm_action = storm_action;
    }

    // DSCP -> class; no entry: queue 0, no class.
    table traffic_class {
        key = {
            hdr.ipv4.dscp: exact;
        }
        actions = {
            set_class;
            set_lossless_class;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = 64;
    }

    // A (ingress port, class) cell's own XOFF, XON and headroom, in place of
    // the class's. A recirculated held packet looks them up by the port it
    // first came in on (held_ports). No entry: the class's.
    action set_port_thresholds(bit<32> xoff, bit<32> xon, bit<32> headroom) {
        meta.tc.xoff = xoff;
        meta.tc.xon = xon;
        meta.tc.headroom = headroom;
    }

    table pfc_port_thresholds {
        key = {
            meta.tc.in_port: exact;
            meta.tc.tclass: exact;
        }
        actions = {
            set_port_thresholds;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = PFC_CELLS;
    }

    // Actions assign; register, counter and clone calls are statements of
    // their own. p4c copies an extern's argument into a temporary (metadata
    // BMv2 zeroes for every packet, lossless or not) when the same action,
    // or the same run of apply statements, assigned it first or when it is
    // an expression; a named action call keeps them apart.
    action cells() {
        meta.tc.in_cell = (bit<32>) (std_meta.ingress_port[5:0] ++ meta.tc.tclass[2:0]);
        meta.tc.out_cell = (bit<32>) (std_meta.egress_spec[5:0] ++ meta.tc.out_class[2:0]);
        meta.tc.now = std_meta.ingress_global_timestamp;
    }

    // The lossless class a packet leaves in, off the expected routes.
    action change_class(bit<8> out_class, bit<3> queue, bit<6> dscp) {
        meta.tc.out_class = out_class;
        meta.tc.dscp = dscp;
        std_meta.priority = queue;
    }

    table class_change {
        key = {
            meta.tc.in_port: exact;
            std_meta.egress_spec: exact;
            meta.tc.tclass: exact;
        }
        actions = {
            change_class;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = 1024;
    }

    // pfc_occupancy is read, changed and written in one action: BMv2 holds
    // the locks of an action's registers while it runs, and egress threads
    // release cells that ingress admits into (apart, updates were lost).
    action admit() {
        pfc_occupancy.read(meta.tc.occupancy, meta.tc.in_cell);
        meta.tc.occupancy = meta.tc.occupancy + 1;
        pfc_occupancy.write(meta.tc.in_cell, meta.tc.occupancy);
        meta.pfc_carry = PFC_CARRY_ADMITTED;
    }

    action refuse() {
        pfc_occupancy.read(meta.tc.occupancy, meta.tc.in_cell);
        meta.tc.occupancy = meta.tc.occupancy - 1;
        pfc_occupancy.write(meta.tc.in_cell, meta.tc.occupancy);
        meta.pfc_carry = 0;
        meta.drop_reason = DROP_LOSSLESS_HEADROOM;
    }

    // The clone that egress turns into a pause out of the ingress port keeps pfc_frame.
    action pause_frame() {
        meta.pfc_frame = (bit<32>) meta.tc.tclass[2:0] << PFC_FRAME_CLASS_LO | (bit<32>) meta.tc.pause_quanta;
        meta.tc.session = PFC_SESSION_BASE + (bit<32>) std_meta.ingress_port;
    }

    // A held packet, recirculated: its ports from pfc_carry (class_change
    // then gives it its class out again), back to the hold queue.
    action held_ports() {
        std_meta.egress_spec = meta.pfc_carry[PFC_CARRY_PORT_HI:PFC_CARRY_PORT_LO];
        meta.tc.in_port = meta.pfc_carry[PFC_CARRY_IN_PORT_HI:PFC_CARRY_IN_PORT_LO];
    }

    action back_to_hold() {
        std_meta.priority = meta.tc.hold_queue;
        meta.tc.in_cell = (bit<32>) (meta.tc.in_port[5:0] ++ meta.tc.tclass[2:0]);
    }

    // Whether this switch has traffic classes at all: a keyless table whose
    // default action the controller sets. Off, a packet costs its miss.
    action classify() { }

    table lossless_switch {
        actions = {
            classify;
            NoAction;
        }
        default_action = NoAction();
    }

    apply {
        switch (lossless_switch.apply().action_run) {
            classify: {
                switch (traffic_class.apply().action_run) {
                    set_class: {
                        if (meta.drop_reason == DROP_NONE) {
                            cells();
                            class_packets.count(meta.tc.out_cell);
                        }
                        meta.tc.setInvalid();           // nothing else to do: egress need not know
                    }
                    set_lossless_class: {
                        if (meta.pfc_carry != 0) {
                            held_ports();               // a held packet, recirculated
                        }
                        pfc_port_thresholds.apply();
                        class_change.apply();
                        if (meta.pfc_carry != 0) {
                            back_to_hold();
                        } else if (std_meta.mcast_grp == 0 && meta.drop_reason == DROP_NONE) {
                            cells();
                            class_packets.count(meta.tc.out_cell);
                            admit();
                            pfc_occupancy_peak.read(meta.tc.peak, meta.tc.in_cell);
                            if (meta.tc.occupancy > meta.tc.peak) {
                                pfc_occupancy_peak.write(meta.tc.in_cell, meta.tc.occupancy);
                            }
                            if (meta.tc.occupancy > meta.tc.xoff + meta.tc.headroom) {
                                refuse();                   // beyond the headroom
                                pfc_headroom_dropped.count(meta.tc.in_cell);
                                meta.tc.setInvalid();
                            } else {
                                pfc_xoff_sent.read(meta.tc.time, meta.tc.in_cell);
                                // At XOFF a pause; while pausing (until XON), again every refresh_us.
                                if ((meta.tc.time == 0 && meta.tc.occupancy >= meta.tc.xoff)
                                        || (meta.tc.time != 0 && meta.tc.now >= meta.tc.time + meta.tc.refresh_us)) {
                                    pfc_xoff_sent.write(meta.tc.in_cell, meta.tc.now);
                                    pfc_pause_sent.count(meta.tc.in_cell);
                                    pause_frame();
                                    clone_preserving_field_list(CloneType.I2E, meta.tc.session, PFC_CARRY_FIELDS);
                                }
                            }
                        } else {
                            meta.tc.setInvalid();       // multicast, or dropped: not in the buffer model
                        }
                    }
                }
            }
        }
    }
}

// A PFC frame on a port: each class it names is paused for its time
// (quanta of 512 bit times, scaled to the emulated link by the port's
// quantum_x1024_us), or resumed (time 0). Consumed here, never forwarded.
#define PFC_CLASS_CELL(C) \
    action class##C##_cell() { \
        meta.tc.in_cell = (bit<32>) (std_meta.ingress_port[5:0] ++ 3w##C); \
        meta.tc.time = meta.tc.now + (((bit<48>) hdr.pfc.time##C * (bit<48>) meta.tc.quantum) >> 10); \
    }

#define PFC_RECEIVE_CLASS(C) \
    if ((hdr.pfc.class_enable & (8w1 << C)) != 0) { \
        class##C##_cell(); \
        pfc_frames_received.count(meta.tc.in_cell); \
        pfc_paused_until.read(meta.tc.until, meta.tc.in_cell); \
        pfc_paused_until.write(meta.tc.in_cell, meta.tc.time); \
        pfc_last_frame.read(meta.tc.last_frame, meta.tc.in_cell); \
        pfc_last_frame.write(meta.tc.in_cell, meta.tc.now); \
        if (meta.tc.until > meta.tc.last_frame) { \
            /* paused since the last frame: until now, or until it ran out */ \
            pfc_paused_us.read(meta.tc.paused_us, meta.tc.in_cell); \
            if (meta.tc.until > meta.tc.now) { \
                paused_until_now(); \
            } else { \
                paused_until_expiry(); \
            } \
            pfc_paused_us.write(meta.tc.in_cell, meta.tc.paused_us); \
        } \
        if (hdr.pfc.time##C != 0) { \
            /* a pause, not a resume: the watchdog's clocks. Paused from now \
               if it was not before: the time without progress starts here. */ \
            pfc_last_pause.write(meta.tc.in_cell, meta.tc.now); \
            if (meta.tc.until <= meta.tc.now) { \
                pfc_last_progress.write(meta.tc.in_cell, meta.tc.now); \
            } \
        } \
    }

control PfcReceive(in headers_t hdr, inout local_metadata_t meta, in standard_metadata_t std_meta) {
    action honour(bit<32> quantum_x1024_us) {
        meta.tc.setValid();
        meta.tc.quantum = quantum_x1024_us;
        meta.tc.now = std_meta.ingress_global_timestamp;
    }

    // Ports with PFC on, and how long a pause quantum lasts on their link.
    table pfc_port {
        key = {
            std_meta.ingress_port: exact;
        }
        actions = {
            honour;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = PORT_COUNT;
    }

    // The paused time since the cell's last frame, added when the next one arrives.
    action paused_until_now() {
        meta.tc.paused_us = meta.tc.paused_us + (meta.tc.now - meta.tc.last_frame);
    }

    action paused_until_expiry() {
        meta.tc.paused_us = meta.tc.paused_us + (meta.tc.until - meta.tc.last_frame);
    }

    PFC_CLASS_CELL(0)
    PFC_CLASS_CELL(1)
    PFC_CLASS_CELL(2)
    PFC_CLASS_CELL(3)
    PFC_CLASS_CELL(4)
    PFC_CLASS_CELL(5)
    PFC_CLASS_CELL(6)
    PFC_CLASS_CELL(7)

    apply {
        if (pfc_port.apply().hit) {
            PFC_RECEIVE_CLASS(0)
            PFC_RECEIVE_CLASS(1)
            PFC_RECEIVE_CLASS(2)
            PFC_RECEIVE_CLASS(3)
            PFC_RECEIVE_CLASS(4)
            PFC_RECEIVE_CLASS(5)
            PFC_RECEIVE_CLASS(6)
            PFC_RECEIVE_CLASS(7)
            meta.tc.setInvalid();
            meta.drop_reason = DROP_PFC_FRAME;
        } else {
            meta.drop_reason = DROP_PFC_PORT_OFF;
        }
    }
}

// Egress, for packets that carry lossless work (meta.pfc_carry != 0): a
// clone to turn into a PFC frame, or a lossless packet to send, hold or
// release. Sets meta.pfc_carry to PFC_CARRY_HELD (or above) when the rest
// of egress must not run: the packet is recirculated, dropped or a frame.
#define PFC_FRAME_TIME(C) \
    if (meta.pfc_frame[PFC_FRAME_CLASS_HI:PFC_FRAME_CLASS_LO] == C) { \
        hdr.pfc.time##C = meta.pfc_frame[15:0]; \
    }

control LosslessEgress(inout headers_t hdr, inout local_metadata_t meta, inout standard_metadata_t std_meta) {
    action pfc_frame(mac_addr_t port_mac) {
        hdr.ethernet.dst_addr = PFC_DST_MAC;
        hdr.ethernet.src_addr = port_mac;
        hdr.ethernet.ether_type = ETHERTYPE_MAC_CONTROL;
        hdr.vlan.setInvalid();              // an ingress clone is parsed again: its tag is back
        hdr.pfc.setValid();
        hdr.pfc.opcode = PFC_OPCODE;
        hdr.pfc.reserved = 0;
        hdr.pfc.class_enable = (bit<8>) 1 << meta.pfc_frame[PFC_FRAME_CLASS_HI:PFC_FRAME_CLASS_LO];
        hdr.pfc.time0 = 0;
        hdr.pfc.time1 = 0;
        hdr.pfc.time2 = 0;
        hdr.pfc.time3 = 0;
        hdr.pfc.time4 = 0;
        hdr.pfc.time5 = 0;
        hdr.pfc.time6 = 0;
        hdr.pfc.time7 = 0;
        hdr.pfc.pad = 0;
        truncate(PFC_FRAME_BYTES);          // whatever the clone carried after the pad goes
    }

    // The source address of PFC frames out of each port with PFC on.
    table pfc_source {
        key = {
            std_meta.egress_port: exact;
        }
        actions = {
            pfc_frame;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = PORT_COUNT;
    }

    // As in Lossless, register, counter, clone and recirculate calls are
    // apply statements (no p4c temporaries), actions only assign.
    action cell_now() {
        meta.tc.out_cell = (bit<32>) (std_meta.egress_port[5:0] ++ meta.tc.out_class[2:0]);
        meta.tc.now = std_meta.egress_global_timestamp;
        meta.tc.storm = 0;
    }

    action paused_now() {
        meta.tc.paused = (bit<8>) (bit<1>) (meta.tc.until > meta.tc.now);
    }

    action storm_began() {
        meta.tc.time = meta.tc.now;
    }

    action storm_over() {
        meta.tc.time = 0;
    }

    action ignore_pauses() {
        meta.tc.storm = meta.tc.paused;
        meta.tc.paused = 0;
    }

    action next_head() {
        meta.tc.head = meta.tc.head + 1;
        meta.pfc_carry = PFC_CARRY_ADMITTED;
    }

    action admitted() {
        meta.pfc_carry = PFC_CARRY_ADMITTED;
    }

    // One action for the read, change and write (see Lossless's admit).
    action leave_buffer() {
        pfc_occupancy.read(meta.tc.occupancy, meta.tc.in_cell);
        meta.tc.occupancy = meta.tc.occupancy - 1;
        pfc_occupancy.write(meta.tc.in_cell, meta.tc.occupancy);
    }

    action done() {
        meta.pfc_carry = PFC_CARRY_DONE;
    }

    action held_carry() {
        meta.pfc_carry = PFC_CARRY_HELD
                         | ((bit<64>) std_meta.egress_port << PFC_CARRY_PORT_LO)
                         | ((bit<64>) meta.tc.in_cell[8:3] << PFC_CARRY_IN_PORT_LO)
                         | (bit<64>) meta.tc.tail;
        meta.tc.tail = meta.tc.tail + 1;
    }

    // A frame for the class it arrived in, out of its ingress port: a
    // resume (quanta 0), or a pause again.
    action frame_carry(bit<16> quanta) {
        meta.pfc_frame = (bit<32>) meta.tc.tclass[2:0] << PFC_FRAME_CLASS_LO | (bit<32>) quanta;
        meta.tc.session = PFC_SESSION_BASE + (bit<32>) meta.tc.in_cell[8:3];
        meta.pfc_frame_cloned = 1;          // a report clone later in egress must not replace it
    }

    // class_change: the DSCP of the class it leaves in.
    action retag() {
        hdr.ipv4.dscp = meta.tc.dscp;
    }

    apply {
        if (std_meta.instance_type == INSTANCE_INGRESS_CLONE || std_meta.instance_type == INSTANCE_EGRESS_CLONE) {
            // A pause or resume frame out of this port.
            meta.pfc_carry = PFC_CARRY_DONE;
            if (pfc_source.apply().hit) {
                meta.pfc_carry = PFC_CARRY_FRAME;
                PFC_FRAME_TIME(0)
                PFC_FRAME_TIME(1)
                PFC_FRAME_TIME(2)
                PFC_FRAME_TIME(3)
                PFC_FRAME_TIME(4)
                PFC_FRAME_TIME(5)
                PFC_FRAME_TIME(6)
                PFC_FRAME_TIME(7)
            } else {
                mark_to_drop(std_meta);         // PFC off on this port since the clone was made
            }
        } else if (meta.tc.isValid()) {
            // A lossless packet: is its (egress port, class) paused, are packets held there?
            cell_now();
            pfc_paused_until.read(meta.tc.until, meta.tc.out_cell);
            pfc_hold_head.read(meta.tc.head, meta.tc.out_cell);
            pfc_hold_tail.read(meta.tc.tail, meta.tc.out_cell);
            paused_now();
            if (meta.tc.detect_us != 0) {
                // The watchdog: meta.tc.time is when its storm began (0: none).
                pfc_storm.read(meta.tc.time, meta.tc.out_cell);
                pfc_last_progress.read(meta.tc.progress, meta.tc.out_cell);
                pfc_last_pause.read(meta.tc.last_pause, meta.tc.out_cell);
                if (meta.tc.time == 0 && meta.tc.paused == 1 && meta.tc.now >= meta.tc.progress + meta.tc.detect_us) {
                    pfc_storm.write(meta.tc.out_cell, meta.tc.now);
                    pfc_storms_detected.count(meta.tc.out_cell);
                    storm_began();
                } else if (meta.tc.time != 0 && meta.tc.now >= meta.tc.last_pause + meta.tc.restore_us) {
                    pfc_storm.write(meta.tc.out_cell, 0);
                    pfc_storms_restored.count(meta.tc.out_cell);
                    storm_over();
                }
                if (meta.tc.time != 0 && meta.tc.storm_action != PFC_STORM_ALERT) {
                    ignore_pauses();
                }
            }
            if (meta.pfc_carry[PFC_CARRY_KIND_HI:PFC_CARRY_KIND_LO] == PFC_KIND_HELD) {
                // Back from the hold queue: it leaves if the class may go and it is its turn.
                if (meta.tc.paused == 0 && meta.pfc_carry[31:0] == meta.tc.head) {
                    next_head();
                    pfc_hold_head.write(meta.tc.out_cell, meta.tc.head);
                } else {
                    recirculate_preserving_field_list(PFC_CARRY_FIELDS);    // pfc_carry as it came
                }
            } else if (meta.tc.paused == 1 || meta.tc.tail != meta.tc.head) {
                held_carry();                                               // held, numbered
                pfc_hold_tail.write(meta.tc.out_cell, meta.tc.tail);
                pfc_held.count(meta.tc.out_cell);
                recirculate_preserving_field_list(PFC_CARRY_FIELDS);
            } else {
                admitted();
            }
            if (meta.pfc_carry != PFC_CARRY_ADMITTED) {
                // Held (again): while its ingress cell pauses the upstream
                // (from XOFF until it drains below XON), its rounds refresh
                // the pause, as a switch's pause timer does when nothing
                // arrives or leaves (a paused cycle: deadlock).
                pfc_xoff_sent.read(meta.tc.time, meta.tc.in_cell);
                if (meta.tc.time != 0 && meta.tc.now >= meta.tc.time + meta.tc.refresh_us) {
                    pfc_xoff_sent.write(meta.tc.in_cell, meta.tc.now);
                    pfc_pause_sent.count(meta.tc.in_cell);
                    frame_carry(meta.tc.pause_quanta);
                    clone_preserving_field_list(CloneType.E2E, meta.tc.session, PFC_CARRY_FIELDS);
                }
            }
            if (meta.pfc_carry == PFC_CARRY_ADMITTED) {
                // It leaves the switch (or the watchdog drops it): out of the buffer model.
                leave_buffer();
                pfc_last_progress.write(meta.tc.out_cell, meta.tc.now);
                pfc_xoff_sent.read(meta.tc.time, meta.tc.in_cell);
                if (meta.tc.storm == 1 && meta.tc.storm_action == PFC_STORM_DROP) {
                    mark_to_drop(std_meta);
                    pfc_storm_dropped.count(meta.tc.out_cell);
                    done();
                }
                // Dropped or not, it has left the buffer model: the upstream may
                // resume. (A dropped packet that carries the resume's clone then
                // runs the rest of egress: its port counter counts it.)
                if (meta.tc.out_class != meta.tc.tclass) {
                    retag();
                }
                if (meta.tc.occupancy < meta.tc.xon && meta.tc.time != 0) {
                    // Below XON while pausing upstream: resume.
                    pfc_xoff_sent.write(meta.tc.in_cell, 0);
                    pfc_resume_sent.count(meta.tc.in_cell);
                    frame_carry(0);
                    clone_preserving_field_list(CloneType.E2E, meta.tc.session, PFC_CARRY_FIELDS);
                } else if (meta.tc.time != 0 && meta.tc.now >= meta.tc.time + meta.tc.refresh_us) {
                    // Still pausing (not yet below XON) as the pause runs out: pause
                    // again (packets leaving refresh it; with none leaving, held
                    // packets' rounds or the next to arrive do).
                    pfc_xoff_sent.write(meta.tc.in_cell, meta.tc.now);
                    pfc_pause_sent.count(meta.tc.in_cell);
                    frame_carry(meta.tc.pause_quanta);
                    clone_preserving_field_list(CloneType.E2E, meta.tc.session, PFC_CARRY_FIELDS);
                }
            }
        }
    }
}
#endif
