"""RFC 3168 ECN codepoints: the low two bits of the IPv4 TOS byte
(p4src/include/ecn.p4 marks ECT(0)/ECT(1) packets CE)."""

NOT_ECT, ECT1, ECT0, CE = 0b00, 0b01, 0b10, 0b11
