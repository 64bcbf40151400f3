"""RoCEv2-style traffic with DCQCN, run on a host (inside its namespace).

    python -m hostagent.ecn.roce send    --iface h1-eth0 --src-ip .. --dst-ip .. --src-mac .. --gw-mac .. --qp 1
    python -m hostagent.ecn.roce receive --iface h5-eth0 --src-ip .. --src-mac .. --gw-mac ..

The sender (DCQCN reaction point) paces RC SEND_ONLY packets (ECT(0)) at the
rate DCQCN allows and reacts to CNPs. The receiver (notification point)
counts packets, CE marks and PSN gaps per flow, and answers CE with at most
one CNP per flow per interval. Both write a JSON summary and CSV time series.
Options for load balancing: `send --plb` repaths (new UDP source port) on
persistent congestion (hostagent/load_balancing/plb.py); `receive --reorder` delivers each
flow in PSN order through a reorder buffer and reports reordering
(hostagent/load_balancing/reorder.py).
The receiver holds UDP port 4791 (a socket it never reads), so the host's
kernel does not answer every packet with an ICMP port unreachable.
The sender stamps each packet's first 8 payload bytes with its monotonic
clock (ns; every namespace of the machine shares it), and the receiver
reports each flow's one-way delay percentiles from them. Options for a
lossless class: `send --tclass C` honours PFC pauses of class C, `send --pcp P`
priority-tags its frames (802.1Q) with P and honours priority P;
`receive --drain-pps R` is a slow receiver that pauses its uplink.
`receive --until-quiet S` keeps receiving after --duration until no packet
arrived for S seconds: what the fabric still held when the senders stopped
(a paused lossless class drains at its link's rate) is received, not
counted missing. The receiver reports the frames its socket dropped (the
kernel's count: the agent did not keep up), apart from the network's losses.
Frames are built once with the Scapy layers of wire.roce and sent as
bytes on one raw socket; malformed or unexpected frames are counted and
ignored, never fatal.
"""
from __future__ import annotations

import argparse
import csv
import json
import select
import signal
import socket
import struct
import sys
import threading
import time
from collections import defaultdict
from dataclasses import asdict, fields
from pathlib import Path

from hostagent.ecn.dcqcn import DcqcnParams, NotificationPoint, ReactionPoint
from hostagent.lossless import PauseState, ReceiveBuffer
from hostagent.sender import add_host_arguments
from hostagent.start import add_start_arguments, wait_for_start
from wire.ecn import CE, ECT0, NOT_ECT
from wire.roce import CNP, OFFSETS, RC_SEND_ONLY, ROCEV2_UDP_PORT, encode_roce_cnp, encode_roce_data
from hostagent.load_balancing.plb import add_plb_arguments, plb_from_args
from hostagent.load_balancing.reorder import ReorderBank, ReorderParams, add_reorder_arguments

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23
PACKET_STATISTICS = 6         # struct tpacket_stats {tp_packets, tp_drops}: read (and reset) once, at the end
O = OFFSETS
UDP_SPORT = O.udp_dport - 2   # UDP: source port, then destination port
PROGRESS_S = 0.5              # how often the loops call their progress hook
PFC_LISTEN_AFTER_S = 0.5      # a lossless sender keeps reading pauses this long after its last packet
TAG_BYTES = 4                 # an 802.1Q tag (send --pcp)
STAMP_AT = O.min_len          # the payload's first 8 bytes: when the sender sent it (monotonic ns)
QUIET_MAX_S = 30.0            # receive --until-quiet: at most this long after --duration


def open_socket(iface: str) -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((iface, 0))
    try:
        sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)  # do not read back our own frames
    except OSError:
        pass
    return sock


def wait_readable(sock: socket.socket, timeout_s: float) -> None:
    """Sleep until a frame can be read from `sock` (a CNP, a pause, a
    resume) or `timeout_s` passed: the sender wakes for what it must do,
    not on a fixed poll (at 0.5 ms one, four paced senders of the tuning
    incast took 0.24 cores whatever their rate)."""
    if timeout_s > 0:
        select.select([sock], [], [], timeout_s)


SO_TIMESTAMPNS = 35           # Linux (asm-generic/socket.h); Python's socket module does not name it
TIMESPEC = struct.Struct("@qq")
STAMP_CMSG_BYTES = socket.CMSG_SPACE(TIMESPEC.size)


def stamp_arrivals(sock) -> bool:
    """Ask the kernel to timestamp every frame `sock` receives (True if it
    will): an ACK's RTT then ends when the host received it, not when the
    agent, maybe descheduled on a busy machine, read it."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except (AttributeError, OSError):    # not a kernel socket (the unit tests' links)
        return False
    return True


def socket_dropped(sock: socket.socket) -> int | None:
    """Frames the kernel dropped because `sock`'s buffer was full (since it
    was opened or last asked: the count resets when read); None where the
    kernel does not say."""
    try:
        _packets, drops = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    except OSError:
        return None
    return drops


def recv_stamped(sock, size: int = 4096) -> tuple[bytes, float | None]:
    """A frame (at most `size` bytes) and when the kernel received it, on
    time.monotonic()'s clock (None if it gave no timestamp)."""
    frame, ancillary, _flags, _addr = sock.recvmsg(size, STAMP_CMSG_BYTES)
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= TIMESPEC.size:
            sec, nsec = TIMESPEC.unpack_from(data)
            age = max(0.0, time.time() - (sec + nsec * 1e-9))    # the stamp is the wall clock's
            return frame, time.monotonic() - age
    return frame, None


def hold_roce_port() -> socket.socket | None:
    """A UDP socket on the RoCEv2 port that is never read (its buffer the
    smallest): the host's kernel then drops what reaches it instead of
    answering every packet with an ICMP port unreachable, as a host whose
    RDMA NIC consumes the port sends none. None if the port is taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
        sock.bind(("0.0.0.0", ROCEV2_UDP_PORT))
    except OSError:
        sock.close()
        return None
    return sock


def classify(frame: bytes) -> str:
    """'data', 'cnp', or why the frame is not ours: 'short', 'not-ipv4', 'ip-options',
    'not-rocev2', 'unknown-opcode'."""
    if len(frame) < O.min_len:
        return "short"
    if frame[12:14] != b"\x08\x00" or frame[O.ip_tos - 1] >> 4 != 4:
        return "not-ipv4"
    if frame[O.ip_tos - 1] & 0x0F != 5:
        return "ip-options"
    if frame[O.ip_proto] != 17 or int.from_bytes(frame[O.udp_dport:O.udp_dport + 2], "big") != ROCEV2_UDP_PORT:
        return "not-rocev2"
    op = frame[O.bth_opcode]
    if op == RC_SEND_ONLY:
        return "data"
    if op == CNP:
        return "cnp"
    return "unknown-opcode"


def _u24(frame: bytes, at: int) -> int:
    return int.from_bytes(frame[at:at + 3], "big")


def delay_percentiles(delays_ns: list[int]) -> dict | None:
    """p50, p99 and max of one-way delays in ms (None without any)."""
    if not delays_ns:
        return None
    d = sorted(delays_ns)

    def pct(p: float) -> float:
        return round(d[min(len(d) - 1, int(p * len(d)))] / 1e6, 3)
    return {"p50": pct(0.5), "p99": pct(0.99), "max": round(d[-1] / 1e6, 3), "samples": len(d)}


# --------------------------------------------------------------------------

def _record_delay(delays: list[int], rx: bytes) -> None:
    """The one-way delay of a packet the sender stamped (a trimmed header keeps its stamp)."""
    if len(rx) >= STAMP_AT + 8:
        sent_ns = int.from_bytes(rx[STAMP_AT:STAMP_AT + 8], "big")
        if 0 < sent_ns <= time.monotonic_ns():        # stamped by a sender on this machine
            delays.append(time.monotonic_ns() - sent_ns)


def flow_sport(qp: int, k: int = 0) -> int:
    """The UDP source port of queue pair `qp`'s k-th 5-tuple (RoCEv2's range, 0xC000 up)."""
    return 0xC000 | ((qp + k) & 0x3FFF)


def run_sender(a, progress=None, write: bool = True) -> dict:
    """Send until a.duration (or a.packets, when set) with DCQCN, and PLB with a.plb.
    progress(now, sent, rp, plb), if given, is called every PROGRESS_S; True stops."""
    params = DcqcnParams(**{f.name: getattr(a, f.name) for f in fields(DcqcnParams) if getattr(a, f.name, None) is not None})
    pcp = getattr(a, "pcp", None)
    dsts = [a.dst_ip] if isinstance(a.dst_ip, str) else list(a.dst_ip)
    sports = getattr(a, "sports", 1) or 1
    if sports < 1 or sports > 0x4000:
        raise ValueError(f"--sports must be within 1..{0x4000}, got {sports}")
    if getattr(a, "plb", False) and len(dsts) * sports > 1:
        raise ValueError("--plb repaths one flow: give one --dst-ip and --sports 1")
    # One frame per (source port, destination): packets go round the list,
    # to each destination in turn, so each gets its share evenly, spread over
    # `sports` 5-tuples (the flows a network's hashes see); each destination
    # has its own PSNs.
    frames = [bytearray(encode_roce_data(a.src_mac, a.gw_mac, a.src_ip, dst, a.qp, payload=a.payload,
                                         ecn=NOT_ECT if a.not_ect else ECT0, dscp=getattr(a, "dscp", 0), pcp=pcp,
                                         sport=flow_sport(a.qp, k)))
              for k in range(sports) for dst in dsts]
    frame = frames[0]
    tag = TAG_BYTES if pcp is not None else 0      # the fields below sit that much further in a tagged frame
    tclass = getattr(a, "tclass", None)
    if tclass is None and pcp is not None:
        tclass = pcp                                # PFC priority = the PCP the NIC tags
    pfc = PauseState(getattr(a, "link_mbps", 100.0)) if tclass is not None else None   # a NIC honouring PFC for its class
    psn_at, sport_at, stamp_at = O.bth_psn + tag, UDP_SPORT + tag, STAMP_AT + tag
    stamp = a.payload >= 8
    sock = open_socket(a.iface)
    sock.setblocking(False)
    rp = ReactionPoint(params, now=0.0)
    plb = plb_from_args(a, sport=int.from_bytes(frame[sport_at:sport_at + 2], "big"))
    limit = getattr(a, "packets", None)
    series = []
    ignored: defaultdict[str, int] = defaultdict(int)
    sent = 0
    sent_to = [0] * len(dsts)                       # packets per destination: its next PSN
    listening = not a.fixed_rate or pfc is not None or plb is not None   # else nothing to read: sleep until due
    started_late_s = wait_for_start(a)
    send_late_s = started_late_s                    # the furthest behind its schedule a packet went out
    t0, t0_wall = time.monotonic(), time.time()
    next_send, next_sample, next_progress, end = 0.0, 0.0, 0.0, a.duration
    while True:
        now = time.monotonic() - t0
        if now >= end or (limit is not None and sent >= limit):
            break
        while True:  # CNPs
            try:
                rx = sock.recv(2048)
            except BlockingIOError:
                break
            if pfc is not None and pfc.on_frame(rx, now):
                continue
            kind = classify(rx)
            if kind == "cnp" and _u24(rx, O.bth_dqpn) == a.qp:
                if not a.fixed_rate:
                    rp.on_cnp(now)
                if plb is not None:
                    plb.on_cnp(now)
            elif kind != "data":
                ignored[kind] += 1
        if not a.fixed_rate:
            rp.advance(now)
        if plb is not None:
            sport = plb.advance(now)
            if sport is not None:  # repath: the next packets carry a new ECMP hash
                frame[sport_at:sport_at + 2] = sport.to_bytes(2, "big")
        if now >= next_sample:
            series.append((round(now, 4), round(rp.rate, 2), round(rp.target, 2), round(rp.alpha, 4), sent, rp.cnps)
                          + ((plb.sport,) if plb is not None else ()))
            next_sample += a.sample_s
        if progress is not None and now >= next_progress:
            next_progress += PROGRESS_S
            if progress(now, sent, rp, plb):
                break
        due = min(next_sample, next_progress if progress is not None else end, end)    # besides the next packet
        if pfc is not None and tclass is not None and pfc.paused(tclass, now):
            next_send = max(next_send, now)              # paused: nothing goes out, and no burst after
            wait_readable(sock, min(pfc.until[tclass], due) - now)     # the pause's end, or a frame: a resume
        elif now >= next_send:
            send_late_s = max(send_late_s, now - next_send)
            frame = frames[sent % len(frames)]
            d = sent % len(dsts)
            frame[psn_at:psn_at + 3] = (sent_to[d] & 0xFFFFFF).to_bytes(3, "big")
            if stamp:
                frame[stamp_at:stamp_at + 8] = time.monotonic_ns().to_bytes(8, "big")
            try:
                sock.send(frame)
                sent += 1
                sent_to[d] += 1
                if not a.fixed_rate:
                    rp.on_sent(len(frame), now)
                if plb is not None:
                    plb.on_sent(now)
            except OSError:
                ignored["tx-error"] += 1
            next_send = max(next_send + 1.0 / rp.rate, now - 0.01)  # no catch-up bursts after a stall
        elif listening:
            wait_readable(sock, min(next_send, due) - now)     # CNPs and pauses are read as they arrive
        else:
            time.sleep(max(0.0, min(next_send, due) - now))
    if pfc is not None:      # a NIC hears pauses while idle too: those its last packets caused are counted
        listen_until = time.monotonic() + PFC_LISTEN_AFTER_S
        while (left := listen_until - time.monotonic()) > 0:
            try:
                pfc.on_frame(sock.recv(2048), time.monotonic() - t0)
            except BlockingIOError:
                wait_readable(sock, left)
    summary = {"role": "sender", "qp": a.qp, "src": a.src_ip, "dst": a.dst_ip, "sent": sent,
               "sent_to": dict(zip(dsts, sent_to)), "sports": sports,
               "duration_s": a.duration, "cnps_received": rp.cnps, "final_rate_pps": rp.rate,
               "ignored": dict(ignored), "params": asdict(params), "dcqcn": not a.fixed_rate,
               "t0_wall": t0_wall, "plb": plb.summary() if plb is not None else None,
               "pfc": pfc.summary() if pfc is not None else None,
               "started_late_s": round(started_late_s, 4), "send_late_s": round(send_late_s, 4)}
    if write:
        _write(a.out, summary, ["t_s", "rate_pps", "target_pps", "alpha", "sent", "cnps"]
               + (["sport"] if plb is not None else []), series)
    return summary


def stop_on_signals():
    """(flag, restore): until restore(), SIGTERM and SIGINT set the flag
    instead of killing the process, so a receiver stopped early still writes
    what it measured (signals can only be caught in the main thread;
    elsewhere nothing changes)."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        return stop, lambda: None
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return stop, restore


def run_receiver(a, progress=None, write: bool = True) -> dict:
    """Receive until a.duration; with a.reorder, through a reorder buffer per flow.
    progress(now, flows, rob), if given, is called every PROGRESS_S; True stops."""
    params = DcqcnParams(cnp_interval_s=a.cnp_interval_s)
    np_ = NotificationPoint(params)
    rob = (ReorderBank(ReorderParams(gap_timeout_s=a.reorder_timeout, capacity=a.reorder_capacity), start_psn=0)
           if getattr(a, "reorder", False) else None)
    sock = open_socket(a.iface)
    held = hold_roce_port()
    sock.settimeout(0.05 if rob is None else min(0.05, a.reorder_timeout / 4))  # timeouts fire on time
    slow = None
    if getattr(a, "drain_pps", None):      # a slow receiver: pauses its uplink as its buffer fills
        slow = ReceiveBuffer(a.src_mac, a.pfc_tclass, a.drain_pps, a.link_mbps, xoff=a.pfc_xoff, xon=a.pfc_xon,
                             capacity=a.buffer_packets)
        sock.settimeout(0.002)             # resumes go out on time
    flows: dict = {}
    delays: dict[str, list[int]] = {}              # flow -> one-way delays (ns)
    trim_delays: dict[str, list[int]] = {}         # flow -> one-way delays of its trimmed headers (ns)
    trimmed_dscp = getattr(a, "trimmed_dscp", None)
    cnp_frames: dict = {}
    ignored: defaultdict[str, int] = defaultdict(int)
    # flow -> bin -> [pkts, ce, lost, reorder buffer max occupancy]; with --reorder, lost = declared lost
    bins: dict = defaultdict(lambda: defaultdict(lambda: [0, 0, 0, 0]))
    wait_for_start(a)
    t0, t0_wall = time.monotonic(), time.time()
    next_progress = 0.0
    stopped, restore_signals = stop_on_signals()
    quiet = getattr(a, "until_quiet", None)
    last_data = 0.0                                # when the last data packet arrived (s since t0)
    while not stopped.is_set():
        now = time.monotonic() - t0
        if now >= a.duration and (quiet is None or now - last_data >= quiet or now >= a.duration + QUIET_MAX_S):
            break
        if rob is not None:
            for k, rel in rob.advance(now).items():
                bins[k][int(now / a.bin_s)][2] += rel.lost
        if progress is not None and now >= next_progress:
            next_progress += PROGRESS_S
            if progress(now, flows, rob):
                break
        if slow is not None and (frame := slow.tick(now)) is not None:
            sock.send(frame)
        try:
            rx = sock.recv(4096)
        except socket.timeout:
            continue
        except OSError:
            ignored["rx-error"] += 1
            continue
        now = time.monotonic() - t0  # the arrival time, not the time recv() started waiting
        kind = classify(rx)
        if kind != "data":
            ignored[kind] += 1
            continue
        if slow is not None and rx[O.ip_tos] >> 2 == a.pfc_dscp:
            kept, frame = slow.on_packet(now)
            if frame is not None:
                sock.send(frame)
            if not kept:
                continue                     # the NIC's buffer was full: lost here
        src = socket.inet_ntoa(rx[O.ip_src:O.ip_src + 4])
        qp = _u24(rx, O.bth_dqpn)
        key = f"{src}/{qp}"
        f = flows.get(key)
        if f is None:
            f = flows[key] = {"src": src, "qp": qp, "packets": 0, "bytes": 0, "ce": 0, "cnps_sent": 0,
                              "trimmed": 0, "max_psn": -1, "first_s": now}
        if trimmed_dscp is not None and rx[O.ip_tos] >> 2 == trimmed_dscp:
            f["trimmed"] += 1                # a trimmed header (wire/trimming.py): its packet was not delivered
            _record_delay(trim_delays.setdefault(key, []), rx)
            continue
        psn = _u24(rx, O.bth_psn)
        last_data = now
        b = bins[key][int(now / a.bin_s)]
        b[0] += 1
        if rob is not None:
            b[2] += rob.push(key, psn, now).lost
            b[3] = max(b[3], rob[key].occupancy)
        elif psn > f["max_psn"] + 1:
            b[2] += psn - f["max_psn"] - 1  # a gap: lost packets, noticed now
        f["packets"] += 1
        f["bytes"] += len(rx)
        _record_delay(delays.setdefault(key, []), rx)
        f["max_psn"] = max(f["max_psn"], psn)
        f["last_s"] = now
        if rx[O.ip_tos] & 0b11 == CE:
            f["ce"] += 1
            b[1] += 1
            if np_.should_send_cnp(key, now):
                cnp = cnp_frames.get(key)
                if cnp is None:
                    cnp = cnp_frames[key] = encode_roce_cnp(a.src_mac, a.gw_mac, a.src_ip, src, qp)
                sock.send(cnp)
                f["cnps_sent"] += 1
    restore_signals()
    socket_drops = socket_dropped(sock)
    if held is not None:
        held.close()
    for key, f in flows.items():
        f["lost"] = f["max_psn"] + 1 - f["packets"]  # PSN gaps (no reordering on a single path)
        f["delay_ms"] = delay_percentiles(delays.get(key, []))
        f["trim_delay_ms"] = delay_percentiles(trim_delays.get(key, []))
        if rob is not None:
            f["reorder"] = rob[key].summary()
            f["lost"] = f["reorder"]["missing"]      # robust to reordering, duplicates and PSN wrap
    summary = {"role": "receiver", "flows": flows, "ignored": dict(ignored), "bin_s": a.bin_s, "t0_wall": t0_wall,
               "received_until_s": round(time.monotonic() - t0, 4), "socket_drops": socket_drops,
               "reorder": asdict(rob.params) if rob is not None else None,
               "slow_receiver": slow.summary() if slow is not None else None}
    header = ["t_s", "flow", "packets", "ce", "lost"] + (["reorder_held_max"] if rob is not None else [])
    rows = [(round(i * a.bin_s, 4), key, *v[:len(header) - 2])
            for key, per in bins.items() for i, v in sorted(per.items())]
    if write:
        _write(a.out, summary, header, rows)
    return summary


def _write(prefix: str | None, summary: dict, header: list[str], rows) -> None:
    if not prefix:
        json.dump(summary, sys.stdout, indent=1)
        return
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.json").write_text(json.dumps(summary, indent=1))
    with open(f"{prefix}.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("send", "receive"):
        p = sub.add_parser(name)
        add_host_arguments(p)
        p.add_argument("--duration", type=float, default=10.0)
        add_start_arguments(p)
        p.add_argument("--out", help="output prefix: writes <out>.json and <out>.csv (default: JSON on stdout)")
    s = sub.choices["send"]
    s.add_argument("--dst-ip", required=True, nargs="+",
                   help="destination(s): with several, packets go to each in turn, in the order given "
                        "(each has its own PSNs)")
    s.add_argument("--sports", type=int, default=1,
                   help="spread the packets over this many UDP source ports in turn: as many flows to the "
                        "network's hashes, one to the receiver (default 1)")
    s.add_argument("--qp", type=int, required=True, help="destination queue pair number: identifies the flow")
    s.add_argument("--payload", type=int, default=1000, help="payload bytes per packet")
    s.add_argument("--fixed-rate", action="store_true", help="no DCQCN: send at line rate, ignore CNPs")
    s.add_argument("--not-ect", action="store_true", help="send Not-ECT packets (never marked)")
    s.add_argument("--dscp", type=int, default=0, help="DSCP of the packets (the switches' traffic class key)")
    s.add_argument("--pcp", type=int, choices=range(8), default=None, metavar="P",
                   help="priority-tag the packets (802.1Q, VLAN 0) with PCP P, and honour PFC pauses of priority P")
    s.add_argument("--tclass", type=int, default=None,
                   help="honour PFC pauses for this class (0..7), as a lossless NIC does (default: ignore PFC)")
    s.add_argument("--link-mbps", type=float, default=100.0, help="the host link's rate: the pause quantum's length")
    s.add_argument("--sample-s", type=float, default=0.01)
    for f in fields(DcqcnParams):
        if f.name != "cnp_interval_s":
            s.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=type(f.default), default=None,
                           help=f"DCQCN {f.name} (default {f.default})")
    add_plb_arguments(s)
    r = sub.choices["receive"]
    r.add_argument("--cnp-interval-s", type=float, default=DcqcnParams.cnp_interval_s,
                   help="N: at most one CNP per flow per interval")
    r.add_argument("--bin-s", type=float, default=0.05, help="time-series bin width")
    r.add_argument("--trimmed-dscp", type=int, choices=range(64), default=None, metavar="D",
                   help="a packet marked D is a trimmed header (packet trimming): counted apart, not delivered")
    add_reorder_arguments(r)
    r.add_argument("--until-quiet", type=float, default=None, metavar="S",
                   help="after --duration, keep receiving until no data packet arrived for S seconds (what the "
                        f"fabric still held), at most {QUIET_MAX_S:g} s more")
    r.add_argument("--drain-pps", type=float, default=None,
                   help="a slow receiver: the host takes this many packets/s of the class off its NIC, "
                        "which pauses the uplink (PFC) as its buffer fills")
    r.add_argument("--pfc-tclass", type=int, default=3, help="slow receiver: the class it pauses")
    r.add_argument("--pfc-dscp", type=int, default=26, help="slow receiver: the DSCP of that class's packets")
    r.add_argument("--pfc-xoff", type=int, default=16, help="slow receiver: pause at this many packets buffered")
    r.add_argument("--pfc-xon", type=int, default=8, help="slow receiver: resume at this many")
    r.add_argument("--buffer-packets", type=int, default=64, help="slow receiver: the NIC's buffer")
    r.add_argument("--link-mbps", type=float, default=100.0, help="slow receiver: the link's rate (pause quanta)")
    a = ap.parse_args(argv)
    try:
        (run_sender if a.cmd == "send" else run_receiver)(a)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
