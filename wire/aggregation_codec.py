"""The in-network aggregation protocol's numbers and byte codec, without
Scapy: what the workers, the parameter server, the collective ranks and
the experiments pack and unpack packets with (pack/unpack). A process that
imports only this pays no Scapy import (about 0.2 s of CPU). The packet
is described in wire/aggregation.py, whose Scapy layer the codec is tested
against; wire/aggregation.py re-exports every name here.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional

import numpy as np

AGG_UDP_PORT_BASE = 0xBEE0       # job j: UDP port AGG_UDP_PORT_BASE + j
MAX_JOBS = 15                    # jobs 1..15 (port base + 0 is no job)
CHUNK_ELEMENTS = 64              # AGG_CHUNK_ELEMENTS: a block is one chunk of int32, or MAX_CHUNKS
MAX_CHUNKS = 4                   # AGG_CHUNKS
BLOCK_SIZES = (CHUNK_ELEMENTS, CHUNK_ELEMENTS * MAX_CHUNKS)   # elements a job may declare: 64 or 256
DEFAULT_BLOCK_ELEMENTS = 256     # a job's block unless it declares another (docs/protocols/aggregation.md)
WIDE_PART_ELEMENTS = 128         # a PS result's int64 elements per packet: 1036 bytes of payload, under 1500
HEADER_BYTES = 12
SLOT_SET = 0x8000                # shadow set bit of the slot field
MAX_WORKERS = 32                 # AGG_MAX_WORKERS: one bit each in a slot's bitmap
EXPONENT_BIAS = 128

FLAG_RESULT = 0x01
FLAG_RETRANSMIT = 0x02
FLAG_COLLISION = 0x04
FLAG_OVERFLOW = 0x08
FLAG_FALLBACK = 0x10
FLAG_WIDE = 0x20
FLAG_SERVER = 0x40
FLAG_CONGESTED = 0x80            # a contribution to the sum met a congested queue (ECN CE on the way)
FLAG_NAMES = ["RESULT", "RETRANSMIT", "COLLISION", "OVERFLOW", "FALLBACK", "WIDE", "SERVER", "CONGESTED"]

_HEADER = struct.Struct("!BBBBHHI")
_ELEMENTS32 = np.dtype(">i4")
_ELEMENTS64 = np.dtype(">i8")


def udp_length(block_elements: int) -> int:
    """A packet's UDP length (AGG_UDP_LENGTH_HEAD, AGG_UDP_LENGTH_FULL)."""
    return 8 + HEADER_BYTES + 4 * check_block_elements(block_elements)


def check_block_elements(n: int) -> int:
    if isinstance(n, bool) or n not in BLOCK_SIZES:
        raise ValueError(f"a block is {' or '.join(map(str, BLOCK_SIZES))} elements ({MAX_CHUNKS} chunks of "
                         f"{CHUNK_ELEMENTS}, or one), got {n!r}")
    return n


def wide_parts(block_elements: int) -> list[tuple[int, int]]:
    """(offset, count) of each packet of a WIDE result of a block."""
    return [(o, min(WIDE_PART_ELEMENTS, block_elements - o)) for o in range(0, block_elements, WIDE_PART_ELEMENTS)]


def job_port(job: int) -> int:
    if not 1 <= job <= MAX_JOBS:
        raise ValueError(f"job must be 1..{MAX_JOBS}, got {job}")
    return AGG_UDP_PORT_BASE + job


@dataclass
class AggPacket:
    """A decoded packet (the fast path's view of the Scapy layer)."""
    flags: int
    job: int
    worker: int
    exponent: int        # biased
    slot: int
    seq: int
    elements: np.ndarray  # int32 or (WIDE) int64, native byte order
    offset: int = 0       # WIDE: the index in the block of elements[0]

    @property
    def wide(self) -> bool:
        return bool(self.flags & FLAG_WIDE)


def pack(flags: int, job: int, seq: int, elements: Optional[np.ndarray] = None, *, count: Optional[int] = None,
         slot: int = 0, exponent: int = EXPONENT_BIAS, worker: int = 0, offset: int = 0) -> bytes:
    """A UDP payload. `elements`: a block (int32: one of BLOCK_SIZES values),
    or with FLAG_WIDE up to WIDE_PART_ELEMENTS int64 from element `offset`
    of a block; None sends `count` zeros (a request)."""
    wide = bool(flags & FLAG_WIDE)
    dtype = _ELEMENTS64 if wide else _ELEMENTS32
    n = count if elements is None else len(elements)
    if n is None:
        raise ValueError("pack: give the elements, or their count")
    if wide:
        if not 1 <= n <= WIDE_PART_ELEMENTS:
            raise ValueError(f"a WIDE packet carries 1..{WIDE_PART_ELEMENTS} int64 elements, got {n}")
    else:
        check_block_elements(n)
        if offset:
            raise ValueError("only a WIDE packet carries an offset")
    if elements is None:
        body = bytes(n * dtype.itemsize)
    else:
        body = np.asarray(elements).astype(dtype, casting="unsafe" if not wide else "same_kind").tobytes()
    return _HEADER.pack(flags, job, worker, exponent, slot, offset, seq & 0xFFFFFFFF) + body


class MalformedPacket(ValueError):
    """A payload that is not an aggregation packet (named why)."""


def unpack(payload: bytes) -> AggPacket:
    if len(payload) < HEADER_BYTES:
        raise MalformedPacket(f"{len(payload)} bytes, shorter than the {HEADER_BYTES}-byte header")
    flags, job, worker, exponent, slot, offset, seq = _HEADER.unpack_from(payload)
    body = len(payload) - HEADER_BYTES
    dtype: np.dtype = _ELEMENTS64 if flags & FLAG_WIDE else _ELEMENTS32
    if flags & FLAG_WIDE:
        n = body // 8
        if body % 8 or not 1 <= n <= WIDE_PART_ELEMENTS:
            raise MalformedPacket(f"{len(payload)} bytes: a WIDE packet carries 1..{WIDE_PART_ELEMENTS} int64 "
                                  f"elements after the {HEADER_BYTES}-byte header")
    else:
        n = body // 4
        if body % 4 or n not in BLOCK_SIZES:
            raise MalformedPacket(f"{len(payload)} bytes: a block is {' or '.join(map(str, BLOCK_SIZES))} int32 "
                                  f"elements after the {HEADER_BYTES}-byte header")
    elements = np.frombuffer(payload, dtype, n, HEADER_BYTES).astype(np.int64 if flags & FLAG_WIDE else np.int32)
    return AggPacket(flags, job, worker, exponent, slot, seq, elements, offset if flags & FLAG_WIDE else 0)
