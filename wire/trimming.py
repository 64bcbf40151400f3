"""A trimmed packet (packet trimming: Ultra Ethernet 1.0's network layer;
p4src/include/trimming.p4 cuts them): the first bytes of the packet a
switch would have dropped for congestion, marked with a DSCP that says so.

No header of its own: the trim is told by the IPv4 DSCP, and what is left
keeps its headers' offsets. `trimmed(frame)` is the model the switch is
tested against: the same bytes up to the cut, with the IPv4 total length
and the UDP length saying how much is left, the UDP checksum zeroed (the
payload it covered is gone; 0 means "none" in UDP over IPv4) and the IPv4
checksum recomputed.

TRIMMED_DSCP: UE 1.0's public material fixes no value; switches make it a
setting (SAI's trimming proposal, NVIDIA Spectrum). 5 is the project's
default, the one SAI's proposal gives trimmed packets bound for hosts.
TRIM_BYTES: Ethernet (14), IPv4 (20), UDP (8) and RoCEv2's BTH (12) are
54 bytes; 64 keeps them, and 10 bytes of what follows.
"""
from __future__ import annotations

import struct

from wire.ipv4 import ETHERNET_BYTES, IPV4_BYTES, UDP_BYTES, ipv4_checksum    # IPv4: no options (the parser takes none)

MIN_TRIM_BYTES = ETHERNET_BYTES + IPV4_BYTES + UDP_BYTES
TRIM_BYTES = 64
TRIMMED_DSCP = 5

_IPV4 = ETHERNET_BYTES
_IP_PROTO_UDP = 17


def dscp(frame: bytes) -> int:
    """The IPv4 DSCP of an Ethernet frame carrying IPv4 without a tag."""
    return frame[_IPV4 + 1] >> 2


def is_trimmed(frame: bytes, trimmed_dscp: int = TRIMMED_DSCP) -> bool:
    return len(frame) > _IPV4 + 1 and dscp(frame) == trimmed_dscp


def trimmed(frame: bytes, keep: int = TRIM_BYTES, trimmed_dscp: int = TRIMMED_DSCP) -> bytes:
    """`frame` (Ethernet, IPv4 without options, UDP) as a switch trims it to
    `keep` bytes. A frame no longer than `keep`, or not UDP, is not trimmed
    (the switch queues it whole): ValueError."""
    if len(frame) <= keep:
        raise ValueError(f"a {len(frame)}-byte frame is not longer than {keep} bytes: nothing to trim")
    if len(frame) <= _IPV4 + 9 or frame[_IPV4 + 9] != _IP_PROTO_UDP:
        raise ValueError("not UDP: only UDP is trimmed (a TCP segment cut short is no header its receiver can "
                         "use, and one cut inside its options fails the next hop's parser)")
    if keep < MIN_TRIM_BYTES:
        raise ValueError(f"a trim keeps at least {MIN_TRIM_BYTES} bytes (Ethernet, IPv4, UDP), not {keep}")
    out = bytearray(frame[:keep])
    ip = _IPV4
    out[ip + 1] = (trimmed_dscp << 2) | (out[ip + 1] & 0b11)          # the ECN bits stay
    struct.pack_into("!H", out, ip + 2, keep - ETHERNET_BYTES)        # total length
    udp = ip + IPV4_BYTES
    struct.pack_into("!HH", out, udp + 4, keep - ETHERNET_BYTES - IPV4_BYTES, 0)   # length, checksum
    struct.pack_into("!H", out, ip + 10, 0)
    struct.pack_into("!H", out, ip + 10, ipv4_checksum(bytes(out[ip:ip + IPV4_BYTES])))
    return bytes(out)
