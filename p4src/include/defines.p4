// Constants shared by every control of the pipeline: one place to change a
// size, a protocol number or a drop reason. The control plane reads the
// DROP_* constants from this file (control/p4constants.py), so a new drop
// reason only needs a line here.
#ifndef DEFINES_P4
#define DEFINES_P4

typedef bit<9>  port_t;
typedef bit<48> mac_addr_t;
typedef bit<32> ipv4_addr_t;
typedef bit<16> next_id_t;
typedef bit<8>  drop_reason_t;

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  IP_PROTO_TCP = 6;
const bit<8>  IP_PROTO_UDP = 17;

// Table and extern sizes.
const bit<32> PORT_COUNT = 512;            // one counter cell per 9-bit port number
const bit<32> IPV4_LPM_TABLE_SIZE = 4096;
const bit<32> NEXT_HOP_TABLE_SIZE = 4096;  // (ECMP group, slot) entries
#define ECMP_SLOT_BITS 4                   // an ECMP group has 2^ECMP_SLOT_BITS = 16 slots
typedef bit<ECMP_SLOT_BITS> ecmp_slot_t;
const bit<16> ECMP_DEFAULT_SEED = 0x9E37;  // until the controller sets the switch's own (forwarding.p4)

// ECN (RFC 3168): the two low bits of the IPv4 TOS byte.
const bit<2> ECN_NOT_ECT = 0;
const bit<2> ECN_ECT1 = 1;
const bit<2> ECN_ECT0 = 2;
const bit<2> ECN_CE = 3;
typedef bit<19> qdepth_t;                  // standard_metadata.enq_qdepth, in packets
const bit<32> PROBABILITY_SCALE = 1000000; // WRED probabilities are in parts per million

// Why a packet was dropped: index of the ingress drop_counter.
const drop_reason_t DROP_NONE = 0;
const drop_reason_t DROP_PARSER_ERROR = 1;       // truncated or malformed headers
const drop_reason_t DROP_BAD_IPV4_CHECKSUM = 2;
const drop_reason_t DROP_NOT_IPV4 = 3;
const drop_reason_t DROP_NO_ROUTE = 4;           // no LPM match, or next hop missing
const drop_reason_t DROP_TTL_EXPIRED = 5;
const bit<32> DROP_REASON_COUNT = 16;

#endif
