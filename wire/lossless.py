"""PFC frames (IEEE 802.1Qbb priority-based flow control) and the DSCP marks
of traffic classes, as the lossless feature puts them on the wire.

The frame layer is Scapy's own (scapy.contrib.mac_control: EtherType 0x8808
-> MACControl -> MACControlClassBasedFlowControl, bound there): a MAC
control opcode 0x0101, a class-enable vector (bit n: priority n; the upper
byte reserved), eight pause times in quanta of 512 bit times (0 = resume),
zero padding to the 60-byte minimum frame (64 with the FCS the wire adds).
The host agents do not use Scapy: `decode_pfc` and `encode_pfc` work on
bytes, and tests/unit/wire/test_lossless.py checks they give and read what
the Scapy layer does. Scapy is imported only when a Scapy frame is asked
for (`pfc_frame`, the re-exported layers): importing it costs a process
about 0.4 s of CPU, and the agents import this module. The values equal
p4src/include/defines.p4's (checked by the same test).
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from scapy.packet import Packet

ETHERTYPE_MAC_CONTROL = 0x8808
PFC_OPCODE = 0x0101
PFC_DST_MAC = "01:80:c2:00:00:01"
PFC_FRAME_BYTES = 60               # without the FCS
CLASSES = 8
MAX_PAUSE_QUANTA = 0xFFFF
QUANTUM_BITS = 512                 # a pause quantum lasts 512 bit times of the link

_HEADER = struct.Struct("!6s6sHHH8H")      # dst, src, type, opcode, class-enable vector, 8 times
_DST = bytes.fromhex(PFC_DST_MAC.replace(":", ""))


def quantum_us(bandwidth_mbps: float) -> float:
    """How long one pause quantum lasts on a link of `bandwidth_mbps`, in microseconds."""
    if not bandwidth_mbps > 0:
        raise ValueError(f"link bandwidth must be > 0 Mbit/s, got {bandwidth_mbps!r}")
    return QUANTUM_BITS / bandwidth_mbps


def pause_us(quanta: int, bandwidth_mbps: float) -> float:
    """A pause time of `quanta` on that link, in microseconds."""
    return quanta * quantum_us(bandwidth_mbps)


def __getattr__(name: str) -> Any:
    """Scapy's MAC control layers, re-exported, imported when first asked for."""
    if name in ("MACControl", "MACControlClassBasedFlowControl"):
        from scapy.contrib import mac_control
        return getattr(mac_control, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pfc_frame(src_mac: str, times: Mapping[int, int]) -> Packet:
    """A PFC frame (Scapy) that pauses each class in `times` for its quanta (0: resume)."""
    from scapy.contrib.mac_control import MACControlClassBasedFlowControl
    from scapy.layers.l2 import Ether
    layer = MACControlClassBasedFlowControl()
    for c, quanta in _checked(times).items():
        setattr(layer, f"c{c}_enabled", 1)
        setattr(layer, f"c{c}_pause_time", quanta)
    return Ether(dst=PFC_DST_MAC, src=src_mac, type=ETHERTYPE_MAC_CONTROL) / layer


def encode_pfc(src_mac: str, times: Mapping[int, int]) -> bytes:
    """pfc_frame() as bytes, without Scapy (the agent's fast path)."""
    times = _checked(times)
    vector = sum(1 << c for c in times)
    frame = _HEADER.pack(_DST, bytes.fromhex(src_mac.replace(":", "")), ETHERTYPE_MAC_CONTROL, PFC_OPCODE,
                         vector, *(times.get(c, 0) for c in range(CLASSES)))
    return frame + bytes(PFC_FRAME_BYTES - len(frame))


def decode_pfc(frame: bytes) -> dict[int, int] | None:
    """{class: quanta} of the classes a PFC frame names; None if `frame` is
    not a whole PFC frame (another EtherType or opcode, or a runt)."""
    if len(frame) < PFC_FRAME_BYTES:
        return None
    _, _, ethertype, opcode, vector, *times = _HEADER.unpack_from(frame)
    if ethertype != ETHERTYPE_MAC_CONTROL or opcode != PFC_OPCODE:
        return None
    return {c: times[c] for c in range(CLASSES) if vector >> c & 1}


def _checked(times: Mapping[int, int]) -> dict[int, int]:
    for c, quanta in times.items():
        if not (isinstance(c, int) and 0 <= c < CLASSES):
            raise ValueError(f"PFC class must be 0..{CLASSES - 1}, got {c!r}")
        if not (isinstance(quanta, int) and 0 <= quanta <= MAX_PAUSE_QUANTA):
            raise ValueError(f"pause time must be 0..{MAX_PAUSE_QUANTA} quanta, got {quanta!r}")
    return dict(times)


def dscp_tos(dscp: int, ecn: int = 0) -> int:
    """The IPv4 TOS byte of a packet marked `dscp` (the traffic class key), with `ecn`."""
    if not 0 <= dscp < 64:
        raise ValueError(f"DSCP must be 0..63, got {dscp!r}")
    return dscp << 2 | ecn
