"""The RC transport on a host (inside its namespace), over one raw socket.

    python -m hostagent.rdma send    --iface h1-eth0 --src-ip .. --src-mac .. --gw-mac .. --dst-ip .. --qp 1
                                     [--cc dcqcn|timely|swift|hpcc] [--mode go-back-n|selective-repeat]
                                     [--message-bytes 65536] [--messages 20 | --duration 10] [--retry-cnt 7]
    python -m hostagent.rdma receive --iface h4-eth0 --src-ip .. --src-mac .. --gw-mac .. [--mode ...] [--cc ...]
    ... send --cc hpcc --cc-param base_rtt_s=0.0036 --cc-param expected_flows=3     # a constant given

The sender posts messages on one queue pair and sends them with the chosen
congestion control; the receiver answers every queue pair that sends to it
(ACKs, NAKs, CNPs for CE marks). Both write a JSON summary (<out>.json;
the sender also a time series, <out>.csv, and each message's posting and
completion time, <out>.messages.csv). Frames that are not the
transport's, or are malformed, are counted by reason and ignored; a
sender honours PFC pauses of its class (`--tclass`) as a lossless NIC does.

The congestion control's constants are its Params dataclass's defaults,
dilated (--dilation); `--cc-param NAME=VALUE` (repeatable) sets one as it
is given, already in the dilated network's units: NAME a field of the
chosen congestion control's Params (the receiver's: cnp_interval_s, the
CNP interval of DCQCN's notification point). `fabric train` and the rdma
experiment give the overlay's `congestion_control:` section so (docs/tuning.md).

Exit status 1, with the reason on stderr: the sender's queue pair failed
(the retry count exceeded, or the receiver refused its mode or congestion
control), or `--messages N` stopped (--duration ran out, SIGTERM) with
fewer than N completed; the receiver refused a queue pair (each is reported
on stderr as it happens; the receiver keeps answering the others). 2: bad
arguments.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import random
import select
import signal
import sys
import time
from collections import defaultdict
from typing import Any, Callable, Mapping, Optional, Sequence

from emulator.dilation import Dilation
from hostagent.ecn.dcqcn import DcqcnParams
from hostagent.ecn.roce import open_socket, recv_stamped, socket_dropped, stamp_arrivals
from hostagent.load_balancing.reorder import ReorderBank, ReorderParams, add_reorder_arguments, psn_diff
from hostagent.lossless import PauseState
from hostagent.rdma.cc.base import CongestionControl, HopInfo
from hostagent.rdma.cc.dcqcn import Dcqcn
from hostagent.rdma.cc.hpcc import Hpcc, HpccParams
from hostagent.rdma.cc.nscc import Nscc, NsccParams
from hostagent.rdma.cc.rccc import Rccc, RcccParams
from hostagent.rdma.cc.swift import Swift, SwiftParams
from hostagent.rdma.cc.timely import Timely, TimelyParams
from hostagent.rdma.frames import FrameBuilder, Malformed, NotOurs, check_dscp, parse
from hostagent.rdma.output import percentiles, write_messages, write_summary
from hostagent.rdma.transport import MODES, SEND, WRITE, Ack, Requester, Responder, TransportParams
from hostagent.rdma.uet import UetParams
from hostagent.rdma.grain import loop_grain
from hostagent.rdma.uet_agent import UET, run_uet_receiver, run_uet_sender, uet_params
from hostagent.sender import add_host_arguments
from hostagent.start import add_start_arguments, wait_for_start
from wire.rdma_codec import RETH_OPCODES, HopRecord
from wire.trimming import TRIMMED_DSCP

SAMPLE_S = 0.01
LAST_HOP_RECORDS = 200_000     # INT to the host: departures kept for the fidelity check (~3 MB of summary)
_stopping = False              # SIGTERM: finish the loop, write the summary


def _stop(*_) -> None:
    global _stopping
    _stopping = True
FRAME_OVERHEAD = 14 + 20 + 8 + 12 + 4      # Ethernet, IPv4, UDP, BTH, ICRC: a queue's bytes per packet beyond payload


def hop_info(hops: tuple[HopRecord, ...], mtu_bytes: int) -> tuple[HopInfo, ...]:
    """INT records as HPCC reads them: the queue in bytes (BMv2 counts
    packets: full-size ones assumed), the link rate in bytes/s."""
    return tuple(HopInfo(ts_s=h.tx_time_us / 1e6, tx_bytes=h.tx_bytes,
                         qlen_bytes=h.queue_packets * (mtu_bytes + FRAME_OVERHEAD),
                         link_bytes_per_s=h.link_rate_mbps * 1e6 / 8) for h in hops)


# Each congestion control's parameters (its Params dataclass); line_rate_pps and mtu_bytes are the
# agent's own options (--line-rate-pps, --mtu), not --cc-param's.
CC_PARAMS: dict[str, type] = {"dcqcn": DcqcnParams, "timely": TimelyParams, "swift": SwiftParams,
                              "hpcc": HpccParams, "nscc": NsccParams, "rccc": RcccParams}
AGENT_OPTIONS = {"line_rate_pps": "--line-rate-pps", "mtu_bytes": "--mtu"}
RECEIVER_CC_PARAMS = ("cnp_interval_s",)     # what the receiver's part takes: DCQCN's CNP interval N


def congestion_controls() -> dict[str, Callable[[argparse.Namespace], CongestionControl]]:
    """name -> a constructor from the agent's options (its --cc-param values
    taken as they are, the other constants dilated)."""
    return {
        "dcqcn": lambda a: Dcqcn(dilation(a).params(DcqcnParams, line_rate_pps=a.line_rate_pps, **cc_params(a))),
        "timely": lambda a: Timely(dilation(a).params(TimelyParams, line_rate_pps=a.line_rate_pps, mtu_bytes=a.mtu,
                                                      **cc_params(a))),
        "swift": lambda a: Swift(dilation(a).params(SwiftParams, line_rate_pps=a.line_rate_pps, mtu_bytes=a.mtu,
                                                    **cc_params(a))),
        "hpcc": lambda a: Hpcc(dilation(a).params(HpccParams, line_rate_pps=a.line_rate_pps, mtu_bytes=a.mtu,
                                                  **cc_params(a))),
        "nscc": lambda a: Nscc(dilation(a).params(NsccParams, line_rate_pps=a.line_rate_pps, mtu_bytes=a.mtu,
                                                  **cc_params(a))),
    }


def uet_congestion_controls() -> dict[str, Callable[[argparse.Namespace], CongestionControl]]:
    """What --mode uet runs: every one of the RC transport's, and RCCC (the
    receiver's credit, which RC cannot carry)."""
    return {**congestion_controls(),
            "rccc": lambda a: Rccc(dilation(a).params(RcccParams, line_rate_pps=a.line_rate_pps, mtu_bytes=a.mtu,
                                                      **cc_params(a)))}


def cc_params(a: argparse.Namespace) -> dict[str, float]:
    """The congestion control's constants given: what main() checked
    (a.cc_params), else the --cc-param pairs parsed, checked now (none
    where the options have none)."""
    given = getattr(a, "cc_params", None)
    if given is None:
        pairs = getattr(a, "cc_param", None) or []
        given = cc_param_values(getattr(a, "cc", None), pairs, getattr(a, "role", "send"),
                                getattr(a, "line_rate_pps", 1000.0), getattr(a, "mtu", 1024),
                                getattr(a, "dilation", 1.0)) if pairs else {}
    return dict(given)


def cc_param_fields(cc: str) -> dict[str, type]:
    """The fields --cc-param may set for `cc`: its Params dataclass's
    numbers but line_rate_pps and mtu_bytes, each with its type (int or
    float; a field whose default is None takes a float)."""
    defaults = CC_PARAMS[cc]()
    out: dict[str, type] = {}
    for f in dataclasses.fields(defaults):
        value = getattr(defaults, f.name)
        if f.name in AGENT_OPTIONS or isinstance(value, bool) or not isinstance(value, (int, float, type(None))):
            continue
        out[f.name] = int if isinstance(value, int) else float
    return out


def parse_cc_param(text: str) -> tuple[str, float]:
    """--cc-param's NAME=VALUE: a name and a finite number (argparse's type)."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: expected a number, got {value!r}") from None
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"{name}: expected a finite number, got {value!r}")
    return name, number


def cc_param_values(cc: Optional[str], given: Sequence[tuple[str, float]] | Mapping[str, float],
                    role: str = "send", line_rate_pps: float = 1000.0, mtu: int = 1024,
                    dilated: float = 1.0) -> dict[str, float]:
    """--cc-param's values for an agent running `cc` in `role`: each NAME a
    field of the congestion control's Params (cc_param_fields; the
    receiver's: RECEIVER_CC_PARAMS), given once, an integer where the field
    is one; the sender's make valid Params with the agent's line rate and
    MTU and the other constants' defaults dilated `dilated` times.
    ValueError naming the parameter otherwise."""
    pairs = list(given.items()) if isinstance(given, Mapping) else list(given)
    if role == "receive":
        fields: dict[str, type] = {name: float for name in RECEIVER_CC_PARAMS}
        whose = "the receiver keeps DCQCN's CNP interval only; the other constants are the sender's"
    elif cc is None or cc not in CC_PARAMS:
        raise ValueError(f"no congestion control {cc!r} (congestion controls: {', '.join(sorted(CC_PARAMS))})")
    else:
        fields = cc_param_fields(cc)
        whose = f"{CC_PARAMS[cc].__name__}'s fields"
    out: dict[str, float] = {}
    for name, value in pairs:
        if name in AGENT_OPTIONS:
            raise ValueError(f"{name}: the agent's own option ({AGENT_OPTIONS[name]}), not a --cc-param")
        if name not in fields:
            raise ValueError(f"{name}: not a parameter of {cc or 'the receiver'} (parameters: "
                             f"{', '.join(sorted(fields))}; {whose})")
        if name in out:
            raise ValueError(f"{name}: given twice ({out[name]:g} and {value:g})")
        if fields[name] is int and not float(value).is_integer():
            raise ValueError(f"{name}: expected a whole number (the parameter is an integer), got {value:g}")
        out[name] = int(value) if fields[name] is int else float(value)
    if role == "send" and cc is not None and out:
        kind: Any = CC_PARAMS[cc]
        mtu_given = {"mtu_bytes": mtu} if "mtu_bytes" in {f.name for f in dataclasses.fields(kind)} else {}
        try:
            Dilation(dilated).params(kind, line_rate_pps=line_rate_pps, **mtu_given, **out)
        except ValueError as exc:
            raise ValueError(f"{', '.join(out)}: {exc}") from None
    return out


def add_cc_param_argument(p: argparse.ArgumentParser) -> None:
    """--cc-param NAME=VALUE, repeatable (cc_param_values checks them against --cc)."""
    p.add_argument("--cc-param", dest="cc_param", action="append", default=[], type=parse_cc_param,
                   metavar="NAME=VALUE",
                   help="a constant of the congestion control's Params (hostagent/rdma/cc/, hostagent/ecn/dcqcn.py), "
                        "taken as it is: already in the dilated network's units (the others: their defaults x "
                        "--dilation); repeatable")




def dilation(a: argparse.Namespace) -> Dilation:
    """The agent's --dilation (1 where the options have none)."""
    return Dilation(getattr(a, "dilation", 1.0))


def transport_params(a: argparse.Namespace) -> TransportParams:
    """The transport's parameters from the options: its timers dilated, then
    what was given (a sender's --rto-s, taken as it is)."""
    given: dict[str, Any] = {"rto_s": a.rto_s} if getattr(a, "rto_s", None) is not None else {}
    given.update({"retry_cnt": a.retry_cnt} if hasattr(a, "retry_cnt") else {})
    given.update({k: v for k, v in cc_params(a).items() if k in RECEIVER_CC_PARAMS})   # the responder's CNPs
    return dilation(a).params(TransportParams, mode=a.mode, mtu_bytes=a.mtu, ack_every=a.ack_every, **given)


def run_sender(a, sock=None) -> dict:
    params = transport_params(a)
    cc = congestion_controls()[a.cc](a)
    req = Requester(params, cc, peer=a.dst_ip, qp=a.qp)
    frames = FrameBuilder(a.src_mac, a.gw_mac, a.src_ip, a.dst_ip, sport=0xC000 | (a.qp & 0x3FFF), dscp=a.dscp)
    sock = sock or open_socket(a.iface)
    sock.setblocking(False)
    stamped = stamp_arrivals(sock)
    pfc = PauseState(a.link_mbps) if a.tclass is not None else None
    grain = loop_grain(a)
    ignored: defaultdict[str, int] = defaultdict(int)
    series = []
    late_s = wait_for_start(a)
    t0 = time.monotonic()
    kind = WRITE if a.write else SEND
    posted = 0

    arrivals = random.Random(a.seed)
    next_arrival = arrivals.expovariate(a.poisson_per_s) if a.poisson_per_s else 0.0

    def top_up(now: float) -> None:
        """Messages to send: a fixed count; or arriving as a Poisson process
        (posted at their arrival time: a message's completion time counts its
        wait behind the queue pair's earlier ones); or always two ahead."""
        nonlocal posted, next_arrival
        if a.poisson_per_s:
            while next_arrival <= now and next_arrival < a.duration:
                req.post(a.message_bytes, next_arrival, kind=kind)
                posted += 1
                next_arrival += arrivals.expovariate(a.poisson_per_s)
            return
        while (posted < a.messages if a.messages else
               now < a.duration and req.pending_messages < 2):
            req.post(a.message_bytes, now, kind=kind)
            posted += 1

    next_sample = 0.0
    while True:
        now = time.monotonic() - t0
        if req.error is not None:
            break
        top_up(now)
        if ((a.messages or (a.poisson_per_s and now >= a.duration)) and req.done) or _stopping \
                or now >= a.duration + (a.drain_s if not a.messages else 0.0):
            break
        while True:
            try:
                rx, received = recv_stamped(sock) if stamped else (sock.recv(4096), None)
            except BlockingIOError:
                break
            if pfc is not None and pfc.on_frame(rx, now):
                continue
            try:
                p = parse(rx, a.trimmed_dscp)
            except (NotOurs, Malformed) as e:
                ignored[str(e).split(" (")[0][:60]] += 1
                continue
            if p.qp != a.qp or p.src_ip != a.dst_ip:
                ignored["another queue pair"] += 1
            elif p.kind == "ack":
                req.on_ack(Ack(p.psn, p.syndrome, p.msn, p.sack, p.hops, p.terms), now,
                           hops=hop_info(p.hops, a.mtu), arrived=None if received is None else received - t0)
            elif p.kind == "cnp":
                req.on_cnp(now)
            else:
                ignored["data to a sender"] += 1
        if now >= next_sample:
            series.append((round(now, 4), round(cc.rate_pps, 2),
                           None if cc.window_packets is None else round(cc.window_packets, 2),
                           req.outstanding, req.stats.sent, req.stats.retransmitted))
            next_sample += SAMPLE_S
        if pfc is not None and pfc.paused(a.tclass, now):
            time.sleep(grain.paused_s)
            continue
        now = time.monotonic() - t0     # the send time an RTT sample starts from: not before the frames read above
        pkt = req.next_packet(now) if now < a.duration or a.messages or a.poisson_per_s else None
        if pkt is not None:
            reth = (0, 0, a.message_bytes) if pkt.opcode in RETH_OPCODES else None
            try:
                sock.send(frames.data(a.qp, pkt.psn, pkt.opcode, pkt.payload, ackreq=pkt.ackreq, reth=reth,
                                      terms=req.terms))
            except OSError:      # refused by the interface: lost, the transport will resend it
                ignored["tx-error"] += 1
        else:       # paced: until the next send time; held by the window (or idle): until a frame comes
            wait = req.next_send_time() - (time.monotonic() - t0)
            select.select([sock], [], [], min(wait, grain.pace_s) if wait > 0 else grain.idle_s)
    completed = [m for m in req.messages if m.completed_at is not None and m.error is None]
    fct_ms = [1000 * (m.completed_at - m.posted_at) for m in completed if m.completed_at is not None]
    elapsed = max((m.completed_at for m in completed if m.completed_at is not None), default=0.0)
    summary = {
        "role": "sender", "started_late_s": round(late_s, 3), "qp": a.qp, "src": a.src_ip, "dst": a.dst_ip, "cc": a.cc, "mode": a.mode,
        "message_bytes": a.message_bytes, "messages_posted": posted, "messages_completed": len(completed),
        "messages_failed": sum(m.error is not None for m in req.messages),
        "error": None if req.error is None else str(req.error), "stopped_by_signal": _stopping,
        "completion_ms": percentiles(fct_ms), "goodput_bytes_per_s": round(len(completed) * a.message_bytes
                                                                            / elapsed, 1) if elapsed else 0.0,
        "sent": req.stats.sent, "retransmitted": req.stats.retransmitted, "timeouts": req.stats.timeouts,
        "retries": req.retries,
        "acks": req.stats.acks, "naks": req.stats.naks, "stale_acks": req.stats.stale_acks,
        "final_rate_pps": round(cc.rate_pps, 2), "ignored": dict(ignored),
        "rtt_ms": {"min": round(1000 * req.min_rtt, 3) if req.min_rtt is not None else None,
                   "smoothed": round(1000 * req.srtt, 3) if req.srtt is not None else None},
        "pfc": pfc.summary() if pfc is not None else None,
        "socket_drops": socket_dropped(sock),      # ACKs the kernel dropped (the agent did not keep up)
    }
    write_summary(a, summary, ("t", "rate_pps", "window_packets", "outstanding", "sent", "retransmitted"), series)
    write_messages(a, req.messages)
    return summary


def sender_failure(a, summary: dict) -> Optional[str]:
    """Why the sender's run failed, for its exit status (None: it did not):
    its queue pair's error, or --messages N stopped short of N."""
    done = f"{summary['messages_completed']} of {a.messages or summary['messages_posted']} messages completed"
    if summary["error"] is not None:
        return f"{summary['error']}; {done}, {summary['messages_failed']} failed with this error"
    if a.messages and summary["messages_completed"] < a.messages:
        why = "stopped by SIGTERM" if summary["stopped_by_signal"] else f"--duration {a.duration:g} s ran out"
        return f"{why} with {done}"
    return None


def run_receiver(a, sock=None) -> dict:
    params = transport_params(a)
    errors: list[str] = []
    sock = sock or open_socket(a.iface)
    sock.settimeout(loop_grain(a).receive_s)
    flows: dict[tuple[str, int], tuple[Responder, FrameBuilder]] = {}
    delivered_bytes: defaultdict[tuple[str, int], int] = defaultdict(int)
    # INT to the host: each packet's departure from the last switch's queue (its
    # tx time, us mod 2^32) and the depth it met there, in arrival order
    last_hop: list[tuple[int, int]] = []
    ignored: defaultdict[str, int] = defaultdict(int)
    rob = (ReorderBank(ReorderParams(gap_timeout_s=a.reorder_timeout, capacity=a.reorder_capacity), start_psn=0)
           if a.reorder else None)
    wait_for_start(a)

    def send(frame: bytes) -> None:
        try:
            sock.send(frame)
        except OSError:          # e.g. ENOBUFS: the interface refused it (a full queue, a drop rule): lost
            ignored["tx-error"] += 1

    def take(key, p, now: float) -> None:
        """A data packet into its queue pair's responder (in PSN order, with --reorder)."""
        rsp, back = flows[key]
        if p.hops and len(last_hop) < LAST_HOP_RECORDS:
            last_hop.append((p.hops[-1].tx_time_us, p.hops[-1].queue_packets))
        refused = rsp.error is not None
        acks, done, cnp = rsp.on_data(p.psn, p.opcode, p.payload, now, ackreq=p.ackreq, ce=p.ce, hops=p.hops,
                                      terms=p.terms)
        if rsp.error is not None and not refused:          # it refuses this queue pair from now on
            errors.append(str(rsp.error))
            print(f"hostagent.rdma: receive: {rsp.error}", file=sys.stderr, flush=True)
        for m in done:
            delivered_bytes[key] += len(m.data)
        for ack in acks:
            send(back.ack(p.qp, ack.psn, ack.syndrome, ack.msn, ack.sack, ack.hops, ack.terms))
        if cnp:
            send(back.cnp(p.qp))

    t0 = time.monotonic()
    while (now := time.monotonic() - t0) < a.duration and not _stopping:
        try:
            rx = sock.recv(4096)
        except TimeoutError:
            rx = None
        except OSError:
            rx = None
        if rx is not None:
            try:
                p = parse(rx, a.trimmed_dscp)
            except (NotOurs, Malformed) as e:
                ignored[str(e).split(" (")[0][:60]] += 1
                p = None
            if p is not None and p.kind not in ("data", "trimmed"):
                ignored[f"{p.kind} to a receiver"] += 1
            elif p is not None:
                key = (p.src_ip, p.qp)
                if key not in flows:
                    flows[key] = (Responder(params, peer=p.src_ip, qp=p.qp, cc=a.cc),
                                  FrameBuilder(a.src_mac, a.gw_mac, a.src_ip, p.src_ip,
                                               sport=0xC000 | (p.qp & 0x3FFF), dscp=a.dscp))
                if p.kind == "trimmed":          # lost, known now: NAK it (no reorder buffer to wait in)
                    rsp, back = flows[key]
                    for ack in rsp.on_trimmed(p.psn, now):
                        send(back.ack(p.qp, ack.psn, ack.syndrome, ack.msn, ack.sack, ack.hops, ack.terms))
                elif rob is None or (key in rob and psn_diff(p.psn, rob[key].next_psn or 0) < 0):
                    take(key, p, now)         # (a retransmission of what the buffer gave up: straight on)
                else:
                    for d in rob.push(key, p.psn, now, item=p).delivered:
                        take(key, d.item, now)
        if rob is not None:
            for flow, rel in rob.advance(now).items():
                for d in rel.delivered:
                    take(flow, d.item, now)        # flow: the (source, QP) key pushed
        for (src, qp), (rsp, back) in flows.items():
            late = rsp.poll(now)
            if late is not None:
                send(back.ack(qp, late.psn, late.syndrome, late.msn, late.sack, late.hops))
    flow_stats = {f"{src}/{qp}": {"delivered_messages": rsp.stats.delivered_messages,
                                  "delivered_bytes": delivered_bytes[(src, qp)], "received": rsp.stats.received,
                                  "duplicates": rsp.stats.duplicates, "out_of_order": rsp.stats.out_of_order,
                                  "dropped_out_of_order": rsp.stats.dropped_out_of_order, "acks": rsp.stats.acks,
                                  "naks": rsp.stats.naks, "cnps": rsp.stats.cnps, "malformed": rsp.stats.malformed,
                                  "refused": rsp.stats.refused,
                                  "error": None if rsp.error is None else str(rsp.error)}
                  for (src, qp), (rsp, _) in sorted(flows.items())}
    summary = {"role": "receiver", "ip": a.src_ip, "mode": a.mode, "cc": a.cc, "errors": errors,
               "ignored": dict(ignored),
               "int_last_hop_queue_packets": percentiles([float(q) for _, q in last_hop]),
               "int_last_hop_departures": last_hop, "flows": flow_stats,
               "reorder": rob.summary() if rob is not None else None,
               "socket_drops": socket_dropped(sock)}       # frames the kernel dropped (the agent did not keep up)
    write_summary(a, summary)
    return summary




def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m hostagent.rdma", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="role", required=True)
    for role in ("send", "receive"):
        p = sub.add_parser(role)
        add_host_arguments(p)
        p.add_argument("--mode", choices=(*MODES, UET), default=MODES[0],
                       help="transport: RoCEv2 RC with go-back-N or IRN's selective repeat, or UET's reliable "
                            "unordered delivery (both ends alike)")
        p.add_argument("--mtu", type=int, default=1024, help="payload bytes per packet")
        p.add_argument("--ack-every", type=int, default=4, help="receiver: an ACK every N packets")
        p.add_argument("--dscp", type=int, default=0, help="DSCP of the packets (the switches' traffic class)")
        p.add_argument("--control-dscp", type=int, default=None, choices=range(64), metavar="D",
                       help="--mode uet: the DSCP of ACKs, NACKs and credits (UE's control class: a queue where "
                            "trimming does not reach them; default: --dscp)")
        p.add_argument("--trimmed-dscp", type=int, default=TRIMMED_DSCP, choices=range(64), metavar="D",
                       help="the DSCP of a packet a switch trimmed (packet trimming; default %(default)s)")
        p.add_argument("--duration", type=float, default=10.0)
        p.add_argument("--dilation", type=float, default=1.0,
                       help="the network runs this many times slower than the defaults describe: every default "
                            "time constant (congestion control, timeouts) multiplied by it and rate divided by it "
                            "(emulator/dilation.py); rates and times given here are taken as they are")
        add_start_arguments(p)
        add_cc_param_argument(p)
        p.add_argument("--out", help="output prefix: <out>.json (and the sender's <out>.csv); default: stdout")
    add_reorder_arguments(sub.choices["receive"])
    sub.choices["receive"].add_argument("--credit-pps", type=float, default=0.0,
                                        help="--mode uet: grant RCCC's senders credit for this host's link of this "
                                             "many packets/s (0: grant none, refuse them)")
    sub.choices["receive"].add_argument("--credit-rtt-s", type=float, default=0.0072,
                                        help="--mode uet: the round trip a credit covers: at most one link rate x "
                                             "this granted and unused (default %(default)s s)")
    sub.choices["receive"].add_argument("--cc", choices=sorted(congestion_controls()), default=None,
                                        help="refuse senders running another congestion control (default: any; "
                                             "the receiver's part serves every one)")
    s = sub.choices["send"]
    s.add_argument("--dst-ip", required=True)
    s.add_argument("--qp", type=int, required=True, help="destination queue pair number")
    s.add_argument("--cc", choices=sorted(uet_congestion_controls()), default="dcqcn",
                   help="congestion control (rccc: --mode uet only)")
    s.add_argument("--line-rate-pps", type=float, default=1000.0, help="the NIC's rate, packets/s")
    s.add_argument("--message-bytes", type=int, default=65536)
    s.add_argument("--messages", type=int, default=0, help="send this many messages, then stop (0: --duration)")
    s.add_argument("--poisson-per-s", type=float, default=0.0,
                   help="messages arrive as a Poisson process of this rate until --duration (0: back to back)")
    s.add_argument("--seed", type=int, default=1, help="of the Poisson arrivals")
    s.add_argument("--write", action="store_true", help="RDMA WRITE instead of SEND")
    s.add_argument("--rto-s", type=float, default=None,
                   help=f"the least retransmission timeout (default {TransportParams.rto_s:g} s x --dilation)")
    s.add_argument("--retry-cnt", type=int, default=TransportParams.retry_cnt,
                   help="retries after timeouts without progress before the queue pair fails (verbs' retry_cnt)")
    s.add_argument("--drain-s", type=float, default=1.0, help="after --duration: time to finish what is in flight "
                                                                  "(with --poisson-per-s: what was posted)")
    s.add_argument("--entropies", type=int, default=16,
                   help="--mode uet: UDP source ports (entropy values) to spray the PDC's packets over, "
                        "consecutive from a base the PDC id picks")
    s.add_argument("--entropy-ports", metavar="P1,P2,...",
                   help="--mode uet: these entropy values instead (a launcher that knows the fabric picks them "
                        "spread over the paths: hostagent/collectives/paths.py)")
    s.add_argument("--tclass", type=int, default=None, help="honour PFC pauses of this class (a lossless NIC)")
    s.add_argument("--link-mbps", type=float, default=100.0, help="the host link's rate: the pause quantum")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    a = ap.parse_args(argv)
    if a.cc_param and a.mode == UET and a.role == "receive":
        ap.error("--cc-param: --mode uet's receiver takes none (the senders' congestion control's constants are "
                 "the senders')")
    try:
        a.cc_params = cc_param_values(a.cc, a.cc_param, a.role, getattr(a, "line_rate_pps", 1000.0), a.mtu,
                                      a.dilation) if a.cc_param else {}
    except ValueError as e:
        ap.error(f"--cc-param {e}")
    uet: Optional[UetParams] = None
    try:
        if a.mode == UET:
            if a.role == "send" and (a.tclass is not None or a.poisson_per_s or a.write):
                raise ValueError("--mode uet takes no --tclass, --poisson-per-s or --write (RC's)")
            if a.role == "receive" and a.reorder:
                raise ValueError("--mode uet delivers unordered: no --reorder")
            if a.role == "receive" and (a.credit_pps < 0 or a.credit_rtt_s <= 0):
                raise ValueError(f"--credit-pps must be >= 0 and --credit-rtt-s > 0, got {a.credit_pps} and "
                                 f"{a.credit_rtt_s}")
            uet = uet_params(a, dilation(a))
        elif a.cc == "rccc":
            raise ValueError("--cc rccc is UET's receiver credit: it runs with --mode uet only")
        elif a.control_dscp is not None:
            raise ValueError("--control-dscp is UET's control class: it runs with --mode uet only")
        else:
            transport_params(a)
        check_dscp(a.dscp, a.trimmed_dscp)
        if a.control_dscp is not None:
            check_dscp(a.control_dscp, a.trimmed_dscp)
        if a.role == "send" and a.message_bytes < 1:
            raise ValueError(f"--message-bytes must be >= 1, got {a.message_bytes}")
        if a.role == "send" and (a.poisson_per_s < 0 or (a.poisson_per_s and a.messages)):
            raise ValueError(f"--poisson-per-s must be >= 0 and not given with --messages, "
                             f"got {a.poisson_per_s} (--messages {a.messages})")
    except ValueError as e:
        print(f"hostagent.rdma: {e}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop)
    if a.role == "send":
        summary = (run_uet_sender(a, uet_congestion_controls()[a.cc](a), uet, lambda: _stopping) if uet is not None
                   else run_sender(a))
        failure = sender_failure(a, summary)
    else:
        errors = (run_uet_receiver(a, uet, lambda: _stopping) if uet is not None else run_receiver(a))["errors"]
        failure = f"{len(errors)} queue pair(s) refused (reported above)" if errors else None
    if failure is not None:
        print(f"hostagent.rdma: {a.role}: {failure}", file=sys.stderr)
        return 1
    return 0
