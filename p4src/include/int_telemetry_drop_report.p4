// Drop reports (Telemetry Report v2.0, D flag, INT-XD style): a packet the
// ingress drops is cloned to the collector with its drop reason, from the
// switch where it happened (a PFC frame the switch acted on is not a loss,
// and not reported). A trimmed packet is reported too, as DROP_TRIMMED
// (main.p4: its payload was lost; the packet itself, cut, is forwarded
// with EGRESS_INT as its only egress work). Rate-limited per drop reason: at most one report
// per reason per interval, so a storm of drops cannot flood the collector;
// the ones held back are counted (int_report_counter, REPORT_DROP_LIMITED).
// Off (no default action set by the controller): one table miss, on the
// drop path only.
#ifndef INT_DROP_REPORT_P4
#define INT_DROP_REPORT_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

// meta.int_scratch is made valid by report_drops only: making a header valid
// zeroes every field of it, and the scratch header is wide (35 fields), so
// with drop reports off a dropped packet must not pay for it (24k
// instructions of BMv2's 104k for a route miss, measured). p4c cannot see
// the validity through the table, and would warn at every use below.
@noWarn("invalid_header")
control IntDropReport(inout local_metadata_t meta, in standard_metadata_t std_meta) {
    register<bit<32>, drop_reason_t>(DROP_REASON_COUNT) drop_report_time;   // last report per reason (us)
    counter<drop_reason_t>(DROP_REASON_COUNT, CounterType.packets) drop_reports_limited;
    action report_drops(bit<32> min_interval_us) {
        meta.int_scratch.setValid();
        meta.int_scratch.interval_us = min_interval_us;
        meta.egress_work = EGRESS_INT;    // the packet is dropped (or trimmed); its report clone keeps this field: INT's work only
        meta.int_scratch.now_us = (bit<32>) std_meta.ingress_global_timestamp;
        drop_report_time.read(meta.int_scratch.last_us, meta.drop_reason);
    }

    table drop_report {
        key = { }
        actions = {
            report_drops;
            NoAction;
        }
        default_action = NoAction();
        size = 1;
    }

    action clone_drop() {
        meta.int_scratch.now_us = meta.int_scratch.now_us | (bit<32>) (bit<1>) (meta.int_scratch.now_us == 0);  // >= 1
        drop_report_time.write(meta.drop_reason, meta.int_scratch.now_us);
        meta.report.drop = meta.drop_reason ++ (bit<16>) std_meta.ingress_port
                         ++ (bit<64>) std_meta.ingress_global_timestamp;
        clone_preserving_field_list(CloneType.I2E, REPORT_MIRROR_SESSION, INT_REPORT_FIELDS);
    }

    apply {
        switch (drop_report.apply().action_run) {
            report_drops: {
                // a PFC frame the switch acted on is consumed, not lost: never reported.
                // last_us 0: never reported (times are stored as at least 1)
                if (meta.drop_reason == DROP_PFC_FRAME) {
                } else if (meta.int_scratch.last_us == 0
                        || meta.int_scratch.now_us - meta.int_scratch.last_us >= meta.int_scratch.interval_us) {
                    clone_drop();
                } else {
                    drop_reports_limited.count(meta.drop_reason);
                }
            }
        }
    }
}

#endif
