"""Traffic for the load-balancing experiment, run on a host (inside its
namespace): long-lived elephant flows, fixed-size transfers, and a receiver
that measures completion times through the reorder buffer.

    python -m hostagent.traffic elephant --iface h1-eth0 --src-ip .. --src-mac .. --gw-mac .. --dst-ip .. \\
                                         --qp 1 --duration 20 [--plb] [--fixed-rate --line-rate-pps 800]
    python -m hostagent.traffic transfer ... --qp 100 --packets 2000 [--count 5 --gap-s 0.5]
    python -m hostagent.traffic receive  --iface h5-eth0 --src-ip .. --src-mac .. --gw-mac .. --duration 30 \\
                                         [--packets 2000 --flows 5]
    python -m hostagent.traffic fct --receiver rx.json --senders tx1.json tx2.json [--out fct]

Senders and receiver are hostagent.ecn.roce's (RoCEv2 RC SEND_ONLY frames from
wire.roce, DCQCN pacing, optional PLB repathing, CNPs); this module
adds what the experiment needs on top:

  elephant  one flow for --duration (roce's sender as is).
  transfer  --count transfers of --packets packets each, one after the other
            (--gap-s apart). Transfer i uses queue pair qp + i: a new QP, so
            PSNs from 0 and a new UDP source port (a new ECMP hash, as a new
            connection would get); the receiver tells transfers apart by
            (source IP, QP).
  receive   roce's receiver with the reorder buffer always on. A transfer of N
            packets completes when the receiver delivers PSN N - 1 in order
            (a hole before it costs up to --reorder-timeout, then it is
            declared lost and delivery goes on). With --packets N, flows that
            got that far are reported as they complete, and --flows K stops
            the receiver once K flows completed. --packets applies to every
            flow: for a mix of elephants and transfers at one receiver, leave
            it out and use `fct`, which knows the transfers from the senders.
            Nothing is retransmitted: a transfer whose last packet is lost
            never completes, and is reported incomplete.
  fct       joins the receiver's JSON with the senders' JSON: flow completion
            time = the receiver's wall-clock instant of the in-order delivery
            of PSN N - 1, minus the sender's wall-clock start of the transfer.
            Both clocks are the same machine's (network namespaces share it),
            which is what makes this subtraction valid here; across machines
            it would need synchronised clocks.

Every command writes JSON and CSV under --out (a path prefix), prints progress
every --progress-s, and says where its files went. Errors in the arguments
are named (exit 2); frames the agents do not expect are counted and ignored.
"""
from __future__ import annotations

import argparse
import copy
import csv
import json
import math
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from hostagent.ecn.dcqcn import DcqcnParams
from hostagent.load_balancing.plb import add_plb_arguments
from hostagent.load_balancing.reorder import PSN_MOD, add_reorder_arguments
from hostagent.ecn.roce import _write, run_receiver, run_sender

FLOW_COLUMNS = ["flow", "packets", "delivered", "lost", "late", "duplicates", "reordered", "depth_max", "depth_mean",
                "occupancy_max", "occupancy_mean", "delay_mean_s", "delay_max_s", "released_by_timeout", "ce",
                "cnps_sent", "first_s", "last_delivery_s", "completion_s"]
FCT_COLUMNS = ["flow", "packets", "sent", "complete", "start_wall", "completed_wall", "fct_s", "rx_span_s", "lost",
               "late", "reordered", "depth_max", "delay_max_s", "repaths"]


# ---- pure helpers (unit-tested) -----------------------------------------------

def completion_s(flow: dict, packets: int) -> Optional[float]:
    """When (receiver seconds) a flow's PSN packets-1 was delivered in order, or None.
    `flow` is one entry of a receiver summary's "flows" (with "reorder")."""
    r = flow.get("reorder")
    if not r or r.get("delivered_through") is None or r["delivered_through"] < packets - 1:
        return None
    return r["last_delivery_s"]


def completions(receiver: dict, packets: int) -> Dict[str, dict]:
    """Every flow of a receiver summary that delivered `packets` packets' worth of PSNs."""
    out = {}
    for key, f in receiver["flows"].items():
        t = completion_s(f, packets)
        if t is not None:
            out[key] = {"packets": packets, "completion_s": t, "completed_wall": receiver["t0_wall"] + t,
                        "first_s": f["first_s"], "span_s": t - f["first_s"]}
    return out


def flow_rows(receiver: dict, packets: Optional[int] = None) -> List[dict]:
    """One row per flow of a receiver summary (FLOW_COLUMNS)."""
    rows = []
    for key, f in receiver["flows"].items():
        r = f.get("reorder") or {}
        t = completion_s(f, packets) if packets else None
        rows.append({"flow": key, "packets": f["packets"], "delivered": r.get("delivered"), "lost": f["lost"],
                     "late": r.get("late"), "duplicates": r.get("duplicates"), "reordered": r.get("reordered"),
                     "depth_max": r.get("depth_max"), "depth_mean": r.get("depth_mean"),
                     "occupancy_max": r.get("occupancy_max"), "occupancy_mean": r.get("occupancy_mean"),
                     "delay_mean_s": r.get("delay_mean_s"), "delay_max_s": r.get("delay_max_s"),
                     "released_by_timeout": r.get("released_by_timeout"), "ce": f["ce"],
                     "cnps_sent": f["cnps_sent"], "first_s": f["first_s"],
                     "last_delivery_s": r.get("last_delivery_s"), "completion_s": t})
    return rows


def transfers_of(sender: dict) -> List[dict]:
    """The transfers in one sender JSON (a `transfer` run's list, or a single
    sender summary with "packets"); elephants have none."""
    if sender.get("role") == "transfers":
        return list(sender["transfers"])
    return [sender] if sender.get("packets") else []


def flow_completion_times(receiver: dict, senders: Iterable[dict]) -> List[dict]:
    """One row per transfer (FCT_COLUMNS): complete or not, FCT = the receiver's
    wall-clock delivery of PSN N-1 minus the sender's wall-clock start."""
    rows = []
    for s in senders:
        for t in transfers_of(s):
            key = f"{t['src']}/{t['qp']}"
            n = t["packets"]
            f = receiver["flows"].get(key)
            r = (f or {}).get("reorder") or {}
            done = completion_s(f, n) if f else None
            rows.append({
                "flow": key, "packets": n, "sent": t["sent"], "complete": done is not None,
                "start_wall": t["t0_wall"],
                "completed_wall": receiver["t0_wall"] + done if done is not None else None,
                "fct_s": receiver["t0_wall"] + done - t["t0_wall"] if done is not None else None,
                "rx_span_s": done - f["first_s"] if done is not None else None,
                "lost": f["lost"] if f else None, "late": r.get("late"), "reordered": r.get("reordered"),
                "depth_max": r.get("depth_max"), "delay_max_s": r.get("delay_max_s"),
                "repaths": len(t["plb"]["repaths"]) if t.get("plb") else None})
    return rows


def percentile(values: List[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def fct_summary(rows: List[dict]) -> dict:
    fcts = [r["fct_s"] for r in rows if r["complete"]]
    out: dict[str, float] = {"transfers": len(rows), "complete": len(fcts)}
    if fcts:
        out.update(fct_mean_s=sum(fcts) / len(fcts), fct_p50_s=percentile(fcts, 50),
                   fct_p99_s=percentile(fcts, 99), fct_max_s=max(fcts))
    return out


# ---- commands ------------------------------------------------------------------

def _every(period: float):
    """A gate that opens once per `period` seconds of the caller's clock (0: never)."""
    state = {"next": 0.0}

    def due(now: float) -> bool:
        if period <= 0 or now < state["next"]:
            return False
        state["next"] = max(state["next"] + period, now - period / 2)
        return True
    return due


def _sender_progress(label: str, period: float):
    due = _every(period)

    def progress(now, sent, rp, plb) -> bool:
        if due(now):
            extra = f", sport {plb.sport}, repaths {len(plb.state.repaths)}" if plb is not None else ""
            print(f"[{now:6.1f}s] {label}: sent {sent}, rate {rp.rate:.0f} pps, CNPs {_cnps(rp.cnps, plb)}{extra}",
                  flush=True)
        return False
    return progress


def _cnps(dcqcn_cnps: int, plb) -> int:
    """CNPs received: DCQCN counts none at a fixed rate (it ignores them); PLB counts them all."""
    return plb.cnps if plb is not None else dcqcn_cnps


def _summary_cnps(s: dict) -> int:
    """The same, from a sender summary."""
    return s["plb"]["cnps"] if s["plb"] else s["cnps_received"]


def _write_csv(path: Path, columns: List[str], rows: List[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)


def cmd_elephant(a) -> int:
    a.packets = None
    label = f"elephant {a.src_ip} -> {a.dst_ip} qp {a.qp}"
    print(f"{label}: {a.duration:g} s, {'fixed rate' if a.fixed_rate else 'DCQCN'}"
          f"{', PLB' if a.plb else ''}", flush=True)
    s = run_sender(a, progress=_sender_progress(label, a.progress_s))
    repaths = len(s["plb"]["repaths"]) if s["plb"] else 0
    print(f"{label}: sent {s['sent']} packets, CNPs {_summary_cnps(s)}, repaths {repaths}")
    print(f"wrote {a.out}.json, {a.out}.csv")
    return 0


def cmd_transfer(a) -> int:
    if a.packets < 1 or a.count < 1 or a.gap_s < 0 or not a.timeout > 0:
        raise ValueError("need --packets >= 1, --count >= 1, --gap-s >= 0 and --timeout > 0")
    if not 0 <= a.qp or a.qp + a.count > PSN_MOD:
        raise ValueError(f"queue pairs {a.qp}..{a.qp + a.count - 1} do not fit in 24 bits")
    results = []
    for i in range(a.count):
        ns = copy.copy(a)
        ns.qp, ns.duration = a.qp + i, a.timeout
        ns.start_at = a.start_at if i == 0 else 0.0
        label = f"transfer {i + 1}/{a.count} {a.src_ip} -> {a.dst_ip} qp {ns.qp}"
        s = run_sender(ns, progress=_sender_progress(label, a.progress_s), write=False)
        s.update(index=i, packets=a.packets)
        results.append(s)
        took = "timed out" if s["sent"] < a.packets else "sent"
        print(f"{label}: {took} {s['sent']}/{a.packets} packets, CNPs {_summary_cnps(s)}"
              f"{', repaths %d' % len(s['plb']['repaths']) if s['plb'] else ''}", flush=True)
        if a.gap_s and i + 1 < a.count:
            time.sleep(a.gap_s)
    rows = [{"index": s["index"], "qp": s["qp"], "packets": s["packets"], "sent": s["sent"],
             "t0_wall": s["t0_wall"], "cnps": _summary_cnps(s), "final_rate_pps": s["final_rate_pps"],
             "sport_end": s["plb"]["sport"] if s["plb"] else None,
             "repaths": len(s["plb"]["repaths"]) if s["plb"] else 0} for s in results]
    summary = {"role": "transfers", "src": a.src_ip, "dst": a.dst_ip, "packets": a.packets, "count": a.count,
               "transfers": results}
    _write(a.out, summary, list(rows[0]), [list(r.values()) for r in rows])
    print(f"wrote {a.out}.json, {a.out}.csv")
    return 0


def cmd_receive(a) -> int:
    if a.packets is not None and a.packets < 1:
        raise ValueError("--packets must be >= 1")
    if a.flows is not None and (a.flows < 1 or a.packets is None):
        raise ValueError("--flows needs --packets and must be >= 1")
    a.reorder = True
    due = _every(a.progress_s)
    done: Dict[str, float] = {}

    def progress(now, flows, rob) -> bool:
        if a.packets is not None:
            for key in flows:
                if key not in done and rob is not None and key in rob:
                    buf = rob[key]
                    if buf.delivered_through is not None and buf.delivered_through >= a.packets - 1:
                        done[key] = buf.stats.last_delivery_s
                        span = done[key] - flows[key]["first_s"]
                        print(f"[{now:6.1f}s] {key} complete: {a.packets} packets, "
                              f"{span:.3f} s after its first packet", flush=True)
        if due(now):
            held = sum(rob[k].occupancy for k in rob) if rob is not None else 0
            lost = sum(rob[k].stats.lost for k in rob) if rob is not None else 0
            received = sum(f["packets"] for f in flows.values())
            complete = f", complete {len(done)}" + (f"/{a.flows}" if a.flows else "") if a.packets else ""
            print(f"[{now:6.1f}s] flows {len(flows)}, received {received}, declared lost {lost}, "
                  f"held {held}{complete}", flush=True)
        return a.flows is not None and len(done) >= a.flows

    s = run_receiver(a, progress=progress)          # writes <out>.json and the time series <out>.csv
    if a.packets is not None:
        s["completions"] = completions(s, a.packets)
        Path(f"{a.out}.json").write_text(json.dumps(s, indent=1))
    _write_csv(Path(f"{a.out}-flows.csv"), FLOW_COLUMNS, flow_rows(s, a.packets))
    print(f"{len(s['flows'])} flows" + (f", {len(s.get('completions', {}))} complete" if a.packets else ""))
    print(f"wrote {a.out}.json, {a.out}.csv, {a.out}-flows.csv")
    return 0


def cmd_fct(a) -> int:
    receiver = json.loads(Path(a.receiver).read_text())
    senders = [json.loads(Path(p).read_text()) for p in a.senders]
    if receiver.get("role") != "receiver" or "t0_wall" not in receiver:
        raise ValueError(f"{a.receiver}: not a receiver summary of this version (no t0_wall)")
    try:
        rows = flow_completion_times(receiver, senders)
    except KeyError as exc:
        raise ValueError(f"a sender or receiver file lacks the field {exc}: not written by this version?") from None
    if not rows:
        raise ValueError("no transfers in the sender files (elephants have no completion time)")
    summary = fct_summary(rows)
    out = Path(a.out)
    _write_csv(out.with_name(out.name + ".csv"), FCT_COLUMNS, rows)
    out.with_name(out.name + ".json").write_text(json.dumps({"summary": summary, "transfers": rows}, indent=1))
    line = f"{summary['complete']}/{summary['transfers']} transfers complete"
    if summary["complete"]:
        line += (f"; FCT mean {summary['fct_mean_s']:.3f} s, p50 {summary['fct_p50_s']:.3f}, "
                 f"p99 {summary['fct_p99_s']:.3f}, max {summary['fct_max_s']:.3f}")
    print(line)
    print(f"wrote {a.out}.csv, {a.out}.json")
    return 0


# ---- CLI ---------------------------------------------------------------------------

def _host_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--iface", required=True)
    p.add_argument("--src-ip", required=True)
    p.add_argument("--src-mac", required=True)
    p.add_argument("--gw-mac", required=True, help="MAC of the switch port (the host's gateway)")
    p.add_argument("--start-at", type=float, default=0.0, help="wall-clock start time (to start agents together)")
    p.add_argument("--out", help="output prefix (default traffic-results/<command>-<src-ip>[-qp<qp>])")
    p.add_argument("--progress-s", type=float, default=1.0, help="progress line every this many seconds (0: none)")


def _sender_args(p: argparse.ArgumentParser) -> None:
    _host_args(p)
    p.add_argument("--dst-ip", required=True)
    p.add_argument("--qp", type=int, required=True, help="destination queue pair number: identifies the flow")
    p.add_argument("--payload", type=int, default=1000, help="payload bytes per packet")
    p.add_argument("--fixed-rate", action="store_true", help="no DCQCN: send at --line-rate-pps, ignore CNPs")
    p.add_argument("--not-ect", action="store_true", help="send Not-ECT packets (never marked)")
    p.add_argument("--sample-s", type=float, default=0.01, help="sender time-series period")
    for f in fields(DcqcnParams):
        if f.name != "cnp_interval_s":
            p.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=type(f.default), default=None,
                           help=f"DCQCN {f.name} (default {f.default})")
    add_plb_arguments(p)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m hostagent.traffic", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("elephant", help="one long-lived flow")
    _sender_args(e)
    e.add_argument("--duration", type=float, default=10.0)
    t = sub.add_parser("transfer", help="fixed-size transfers, one after the other, one QP each")
    _sender_args(t)
    t.add_argument("--packets", type=int, required=True, help="packets per transfer")
    t.add_argument("--count", type=int, default=1, help="transfers (QPs qp, qp+1, ...)")
    t.add_argument("--gap-s", type=float, default=0.0, help="pause between transfers")
    t.add_argument("--timeout", type=float, default=60.0, help="give up a transfer after this many seconds")
    r = sub.add_parser("receive", help="receive through the reorder buffer; completion times")
    _host_args(r)
    r.add_argument("--duration", type=float, default=10.0)
    r.add_argument("--cnp-interval-s", type=float, default=DcqcnParams.cnp_interval_s,
                   help="N: at most one CNP per flow per interval")
    r.add_argument("--bin-s", type=float, default=0.05, help="time-series bin width")
    r.add_argument("--packets", type=int, help="transfer size: report flows as they deliver PSN packets-1")
    r.add_argument("--flows", type=int, help="with --packets: stop once this many flows completed")
    add_reorder_arguments(r, always_on=True)
    f = sub.add_parser("fct", help="flow completion times from a receiver's and senders' JSON")
    f.add_argument("--receiver", required=True, help="the receiver's JSON")
    f.add_argument("--senders", nargs="+", required=True, help="the senders' JSON files (transfer and/or elephant)")
    f.add_argument("--out", default="traffic-results/fct", help="output prefix (default traffic-results/fct)")
    return ap


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    if a.cmd != "fct" and not a.out:
        a.out = f"traffic-results/{a.cmd}-{a.src_ip}" + (f"-qp{a.qp}" if a.cmd != "receive" else "")
    try:
        return {"elephant": cmd_elephant, "transfer": cmd_transfer, "receive": cmd_receive, "fct": cmd_fct}[a.cmd](a)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
