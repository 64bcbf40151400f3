"""Host plane failover's wire format (wire/plane_failover.py): the Scapy
layers and the struct codec give the same bytes, and malformed datagrams are
refused with the reason."""
import re

import pytest
from scapy.layers.inet import IP, UDP

from wire import plane_failover as wpf


def test_data_layer_and_codec_agree():
    raw = wpf.pack_data(1, 7, 12, 0xDEADBEEF)
    assert len(raw) == wpf.DATA_BYTES
    layer = wpf.FlowData(plane=1, sender=7, flow=12, seq=0xDEADBEEF)
    assert raw.startswith(bytes(layer))
    parsed = IP(bytes(IP() / UDP(sport=40000, dport=wpf.FLOW_UDP_PORT) / raw))
    assert parsed.haslayer(wpf.FlowData)
    assert (parsed[wpf.FlowData].sender, parsed[wpf.FlowData].flow, parsed[wpf.FlowData].seq) == (7, 12, 0xDEADBEEF)
    assert wpf.unpack_data(raw) == (1, 7, 12, 0xDEADBEEF)


def test_ack_layer_and_codec_agree():
    flows = {3: 100, 0: 5, 65535: 2**32 - 1}
    raw = wpf.pack_ack(1, 2, flows)
    layer = wpf.FlowAck(plane=1, sender=2, flows=[wpf.FlowAckEntry(flow=f, seq=s) for f, s in sorted(flows.items())])
    assert bytes(layer) == raw
    parsed = IP(bytes(IP() / UDP(sport=wpf.FLOW_UDP_PORT, dport=40001) / raw))[wpf.FlowAck]
    assert parsed.count == 3 and {e.flow: e.seq for e in parsed.flows} == flows
    assert wpf.unpack_ack(raw) == (1, 2, flows)


@pytest.mark.parametrize("raw, reason", [
    (b"", "shorter than a FlowData header"),
    (bytes(9), "shorter than a FlowData header"),
    (wpf.pack_ack(0, 1, {1: 2}) + bytes(60), "expected 1 (data)"),
], ids=["empty", "short", "an ack on the data port"])
def test_malformed_data_is_refused(raw, reason):
    with pytest.raises(wpf.FlowFormatError, match=re.escape(reason)):
        wpf.unpack_data(raw)


@pytest.mark.parametrize("raw, reason", [
    (b"\x02\x00", "shorter than a FlowAck header"),
    (wpf.pack_data(0, 1, 2, 3), "expected 2 (ack)"),
    (wpf.pack_ack(0, 1, {1: 2, 3: 4})[:-1], "2 entries need 18 bytes, got 17"),
    (wpf.pack_ack(0, 1, {1: 2}) + b"\0", "1 entries need 12 bytes, got 13"),
], ids=["short", "data on the ack port", "truncated entry", "trailing byte"])
def test_malformed_acks_are_refused(raw, reason):
    with pytest.raises(wpf.FlowFormatError, match=re.escape(reason)):
        wpf.unpack_ack(raw)
