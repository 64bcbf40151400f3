"""The model of a trim (wire/trimming.py) the switch is tested against."""
import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from wire.roce import roce_data
from wire.trimming import MIN_TRIM_BYTES, TRIM_BYTES, TRIMMED_DSCP, dscp, is_trimmed, trimmed
from wire.ecn import ECT0


def packet() -> bytes:
    return bytes(roce_data("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", qp=3, psn=77,
                           payload=1000, ecn=ECT0, dscp=26))


def test_a_trim_keeps_the_first_bytes_with_lengths_dscp_and_checksums_that_say_so():
    frame = packet()
    cut = trimmed(frame)
    assert len(cut) == TRIM_BYTES
    ip = Ether(cut)[IP]
    assert ip.len == TRIM_BYTES - 14 and ip.tos == (TRIMMED_DSCP << 2) | ECT0
    assert ip[UDP].len == TRIM_BYTES - 34 and ip[UDP].chksum == 0
    again = IP(bytes(ip))
    del again.chksum
    assert IP(bytes(again)).chksum == ip.chksum           # a valid IPv4 checksum
    # the rest is the packet's own bytes: addresses, ports, the BTH (its PSN), the sender's stamp
    same = [i for i in range(TRIM_BYTES) if i not in (15, 16, 17, 24, 25, 38, 39, 40, 41)]
    assert all(cut[i] == frame[i] for i in same)
    assert dscp(cut) == TRIMMED_DSCP and is_trimmed(cut) and not is_trimmed(frame)


def test_only_udp_is_trimmed():
    frame = bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=1, dport=2) / Raw(b"x" * 500))
    with pytest.raises(ValueError, match="not UDP: only UDP is trimmed"):
        trimmed(frame)


def test_nothing_to_trim_and_too_short_a_trim_are_errors():
    with pytest.raises(ValueError, match="not longer than 2000 bytes: nothing to trim"):
        trimmed(packet(), keep=2000)
    with pytest.raises(ValueError, match=f"at least {MIN_TRIM_BYTES} bytes"):
        trimmed(packet(), keep=30)
