// Constants shared by every control of the pipeline: one place to change a
// size, a protocol number or a drop reason. The control plane reads the
// DROP_* constants from this file (control/p4constants.py), so a new drop
// reason only needs a line here.
#ifndef DEFINES_P4
#define DEFINES_P4

// Compiling a feature out: -DWITHOUT_ECN, -DWITHOUT_INT_TELEMETRY,
// -DWITHOUT_LOAD_BALANCING, -DWITHOUT_AGGREGATION, -DWITHOUT_FAILOVER,
// -DWITHOUT_LOSSLESS, -DWITHOUT_NONMINIMAL_ROUTING, -DWITHOUT_CENTRAL_ROUTING remove
// its headers, metadata, parser states and controls. Only the benchmarks use
// them (benchmarks/cases.py: what each feature costs a packet while it is
// off); the fabric ships, and is tested, with every feature in.

typedef bit<9>  port_t;
typedef bit<48> mac_addr_t;
typedef bit<32> ipv4_addr_t;
typedef bit<16> next_id_t;
typedef bit<8>  drop_reason_t;

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_VLAN = 0x8100;           // IEEE 802.1Q
const bit<16> ETHERTYPE_SOURCE_ROUTE = 0x88B5;   // IEEE "local experimental": INT probe port lists
const bit<16> ETHERTYPE_VALIANT = 0x88B6;        // IEEE "local experimental 2": a Valiant tag (nonminimal_routing.p4)

// ipv4_t's merged fields (headers.p4): version 4 with a 20-byte header; the
// fragment offset and the DF flag in identification ++ flags ++ offset.
const bit<8>  IPV4_VERSION_IHL = 0x45;
const bit<16> ETHERNET_BYTES = 14;
const bit<16> IPV4_BYTES = 20;                   // without options (the parser takes no others)
const bit<32> IPV4_FRAG_OFFSET_MASK = 0x1FFF;
const bit<32> IPV4_FLAG_DF = 0x4000;
#define IPV4_IHL(ip) ((ip).version_ihl[3:0])

const bit<16> HEARTBEAT_UDP_PORT = 6200;         // a source-routed packet to this port is a heartbeat (failover.p4)
const bit<16> HEARTBEAT_ORIGIN_PORT_BASE = 0xC000;  // a heartbeat from source port base + e comes from edge switch e
#define FAILOVER_ORIGIN_BITS 6
const bit<32> FAILOVER_ORIGINS = 1 << FAILOVER_ORIGIN_BITS;   // edge switches whose paths a switch watches
#define SOURCE_ROUTE_MAX_HOPS 16
#define SOURCE_ROUTE_REST_BITS 240         // (SOURCE_ROUTE_MAX_HOPS - 1) * 16
const bit<8>  IP_PROTO_TCP = 6;
const bit<8>  IP_PROTO_UDP = 17;

// Table and extern sizes.
const bit<32> PORT_COUNT = 512;            // one counter cell per 9-bit port number
const bit<32> IPV4_LPM_TABLE_SIZE = 4096;
const bit<32> NEXT_HOP_TABLE_SIZE = 4096;  // (ECMP group, slot) entries
const bit<32> VALIANT_SOURCE_TABLE_SIZE = 4096;   // (host port, destination) entries
const bit<32> VALIANT_ROUTE_TABLE_SIZE = 4096;    // (intermediate, slot) entries
const bit<32> CENTRAL_ROUTE_TABLE_SIZE = 4096;    // central_routing.p4: flows with an assigned path, per switch
#define ECMP_SLOT_BITS 4                   // an ECMP group has 2^ECMP_SLOT_BITS = 16 slots
typedef bit<ECMP_SLOT_BITS> ecmp_slot_t;
const bit<32> ECMP_SLOTS = 1 << ECMP_SLOT_BITS;
const bit<16> ECMP_DEFAULT_SEED = 0x9E37;  // until the controller sets the switch's own (forwarding.p4)

// Load balancing (load_balancing.p4): groups with a mode, flowlet state cells.
const bit<32> LB_GROUPS = 256;             // ECMP group ids (next_id) a mode can be set for: 0..255
const bit<32> FLOWLET_CELLS = 4096;        // per flow-hash flowlet state (last seen, slot)

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
const drop_reason_t DROP_INT_MALFORMED = 6;      // INT headers: bad version/type, length, hop ML or stack size
const drop_reason_t DROP_AGG_UNKNOWN_JOB = 7;    // aggregation packet to a parameter server of this switch, job not set up
const drop_reason_t DROP_AGG_NOT_WORKER = 8;     // sender is not a worker of the job
const drop_reason_t DROP_AGG_SLOT_RANGE = 9;     // slot outside the job's range
const drop_reason_t DROP_AGG_BAD_LENGTH = 10;    // shorter than one chunk, or a contribution of neither block size
const drop_reason_t DROP_NO_LIVE_MEMBER = 11;    // failover: the member's port and its backup's are dead
const drop_reason_t DROP_LOSSLESS_HEADROOM = 12; // a lossless packet beyond XOFF + headroom: the headroom was too small
const drop_reason_t DROP_PFC_FRAME = 13;         // a PFC frame, acted on and consumed (not a loss)
const drop_reason_t DROP_PFC_PORT_OFF = 14;      // a PFC frame on a port without PFC
const drop_reason_t DROP_PFC_MALFORMED = 15;     // a MAC control frame that is not a whole PFC frame
const drop_reason_t DROP_AGG_NOT_PARENT = 16;    // an aggregation result that did not come from this switch's parent in the job's tree
const drop_reason_t DROP_AGG_BLOCK_SIZE = 17;    // a contribution whose block size is not the one its job declared
const drop_reason_t DROP_TRIMMED = 18;           // cut to its headers by trimming: the header was forwarded, the payload lost
                                                 // (not a drop: never counted in drop_counter; drop reports only, trimming.p4)
const bit<32> DROP_REASON_COUNT = 19;

// nonminimal_packets (nonminimal_routing.p4): what a switch did with a packet
const bit<32> NONMINIMAL_PUSHED = 0;             // a Valiant tag pushed: sent non-minimally
const bit<32> NONMINIMAL_MINIMAL = 1;            // UGAL kept it minimal
const bit<32> NONMINIMAL_REACHED = 2;            // a tag removed at its intermediate
const bit<32> NONMINIMAL_COUNTS = 3;

// meta.egress_work: what a packet asks of egress, one bit per feature, set
// in ingress (0 for every other packet: one condition skips egress work).
// One field, not a flag per feature: BMv2 zeroes every metadata field of
// every packet (docs/benchmark.md, the price list).
const bit<8> EGRESS_INT = 1;            // INT's work (int_telemetry_egress.p4): the packet carries INT, or is a report clone
                                        // (which keeps it), a trimmed packet or a source-routed one
const bit<8> EGRESS_LB_LOAD = 2;        // adaptive load balancing: record the queue depth this packet saw
const bit<8> EGRESS_AGG_RESULT = 4;     // an aggregation result replica: egress addresses it to its worker
const bit<8> EGRESS_TRIM_DEPARTURE = 8; // trimming: a packet counted into its queue's occupancy leaves it (trimming.p4)
const bit<8> EGRESS_INT_TX_BYTES = 16;  // INT is on at this switch: the packet's bytes counted (HPCC's tx bytes); alone,
                                        // nothing else (main.p4's egress: IntTxBytes, no INT table)

// In-band network telemetry (INT v2.1, Telemetry Report v2.0): the wire
// contract is docs/protocols/int_telemetry.md; wire/int_telemetry.py holds the same values.
const bit<16> INT_UDP_PORT = 6000;         // UDP dport announcing INT after the UDP header (NPT 1)
const bit<6>  INT_DSCP = 0x17;             // IPv4 DSCP announcing INT after the TCP header (NPT 0)
const bit<16> REPORT_UDP_PORT = 32766;     // telemetry reports go to this collector port
const bit<4>  INT_VERSION = 2;
const bit<4>  REPORT_VERSION = 2;
const bit<4>  INT_TYPE_MD = 1;
const bit<2>  INT_NPT_DSCP = 0;
const bit<2>  INT_NPT_UDP_PORT = 1;
const bit<8>  INT_HEADER_WORDS = 3;        // INT-MD header, counted by the shim's Length
const bit<16> INT_SHIM_AND_HEADER_BYTES = 16;
const bit<16> FABRIC_DS_ID = 0xAF01;       // this project's INT domain: DS bits = tx bytes, tx time, link rate
const bit<16> INT_DEFAULT_BITMAP = 0xFC00; // node id, L1 ports, hop latency, queue, ingress and egress timestamps: 8 words
// The metadata stack a switch can carry and report, in 4-byte words. A hop
// that would grow the stack beyond it pushes nothing and sets M.
#define INT_MAX_STACK_WORDS 64
#define INT_STACK_BITS 2048                // INT_MAX_STACK_WORDS * 32 (a varbit's size must be a literal)
const bit<8>  INT_MAX_STACK_WORDS_C = INT_MAX_STACK_WORDS;
const bit<32> INT_WATCHLIST_SIZE = 1024;
const bit<32> INT_RAISED_FLOWS = 1024;    // flows raised to every packet (adaptive sampling), per switch
typedef bit<10> int_sampler_t;            // a watchlist entry's sampling counter: 0 .. INT_WATCHLIST_SIZE-1
// A sampler's count with one more packet, back to 0 at the N-th (1 in N, N >= 1;
// 0 samples every packet): an expression, not a condition, whose ?: evaluates
// one side only.
#define SAMPLE_COUNT(count, n) ((count) + 1 < (n) ? (count) + 1 : 32w0)
const bit<16> INT_DEFAULT_MTU = 1500;      // IPv4 bytes, until the controller sets a port's
const bit<32> REPORT_MIRROR_SESSION = 500; // clone session of telemetry reports (set by the controller)
const bit<8>  INT_REPORT_FIELDS = 1;       // @field_list of what a report clone keeps
// Report suppression: per-flow state in registers of INT_FLOW_SLOTS cells,
// indexed by a hash of the 5-tuple (colliding flows share a cell: at worst
// extra reports, and the refresh period bounds what a collision can hide).
const bit<32> INT_FLOW_SLOTS = 4096;
const bit<16> INT_DS_FLAG_CHANGED = 0x8000;  // FABRIC_DS_ID DS flag: a hop saw its flow state change
const bit<16> INT_DS_FLAG_TO_HOST = 0x4000;  // FABRIC_DS_ID DS flag: the host is the sink (HPCC): the last switch pushes its hop
// int_report_counter cells: what became of each report a switch could send
const bit<32> REPORT_FLOW = 0;             // sink report sent
const bit<32> REPORT_SUPPRESSED = 1;       // sink report suppressed (nothing changed)
const bit<32> REPORT_QUEUE = 2;            // congestion report sent
const bit<32> REPORT_QUEUE_LIMITED = 3;    // congestion report dropped by the rate limit
const bit<32> REPORT_DROP = 4;             // drop report sent (held back: drop_reports_limited[reason])
const bit<32> REPORT_YIELDED = 5;          // a report a packet would have sent that waited for the next: the
                                           // packet's one clone was a PFC frame's (lossless.p4: frames first)
const bit<32> REPORT_KINDS = 8;
// In-network aggregation (aggregation.p4; the wire contract is
// docs/protocols/aggregation.md; wire/aggregation.py holds the same values).
// A job's packets use UDP port AGG_UDP_PORT_BASE + job (jobs 1..15: SwitchML's
// 0xBEE0-0xBEEF), from a worker's port to the same port of the job's
// parameter server; the switch that serves that server aggregates them.
const bit<16> AGG_UDP_PORT_BASE = 0xBEE0;
const bit<16> AGG_UDP_PORT_MASK = 0xFFF0;
// A packet's block: one chunk of AGG_CHUNK_ELEMENTS int32, or AGG_CHUNKS of
// them, as its job declares (agg_job); the lanes packed AGG_WORD_BITS / 32 to
// a register word (aggregation_lanes.p4; docs/protocols/aggregation.md: sizes).
#define AGG_CHUNK_ELEMENTS 64
#define AGG_CHUNKS 4
#define AGG_WORD_BITS 2048
const bit<16> AGG_UDP_LENGTH_HEAD = 276;   // UDP 8 + aggregation header 12 + one chunk (4 * AGG_CHUNK_ELEMENTS)
const bit<16> AGG_UDP_LENGTH_FULL = 1044;  // UDP 8 + aggregation header 12 + AGG_CHUNKS chunks
const bit<32> AGG_SLOTS = 512;             // aggregation slots of a switch (jobs get ranges of them)
const bit<32> AGG_CELLS = 1024;            // 2 shadow sets per slot
const bit<32> AGG_MAX_WORKERS = 32;        // a job's workers: one bit each in a slot's bitmap
const bit<16> AGG_SLOT_SET = 0x8000;       // slot field: shadow set bit; the rest is the slot in the job's range
const bit<8>  AGG_FLAG_RESULT = 0x01;      // sums (from the switch, or WIDE from the server)
const bit<8>  AGG_FLAG_RETRANSMIT = 0x02;  // a worker sends this contribution again
const bit<8>  AGG_FLAG_COLLISION = 0x04;   // slot held by another use: sent on to the parameter server
const bit<8>  AGG_FLAG_OVERFLOW = 0x08;    // the sum overflowed int32: the block goes to the parameter server
const bit<8>  AGG_FLAG_FALLBACK = 0x10;    // for the parameter server (contribution or, from it, a request)
const bit<8>  AGG_FLAG_WIDE = 0x20;        // elements are int64 (parameter server results)
const bit<8>  AGG_FLAG_SERVER = 0x40;      // sent by the parameter server
const bit<8>  AGG_FLAG_CONGESTED = 0x80;   // a contribution of the sum crossed a congested queue (ECN CE)
// agg_events cells: what the aggregation control did with packets
const bit<32> AGG_EVENT_CONTRIBUTION = 0;  // a contribution added to a slot
const bit<32> AGG_EVENT_DUPLICATE = 1;     // a contribution already in an unfinished slot: dropped
const bit<32> AGG_EVENT_COMPLETE = 2;      // a slot completed: result multicast
const bit<32> AGG_EVENT_RESULT_AGAIN = 3;  // a contribution to a completed slot: its result unicast
const bit<32> AGG_EVENT_COLLISION = 4;     // slot held: sent to the parameter server
const bit<32> AGG_EVENT_OVERFLOW = 5;      // a slot completed with an overflowed sum
const bit<32> AGG_EVENT_STALE = 6;         // older than the slot's use: dropped
const bit<32> AGG_EVENT_FALLBACK = 7;      // a fallback contribution passed to the parameter server
const bit<32> AGG_EVENT_RELEASED = 8;      // a parameter server result freed the slot of its block
const bit<32> AGG_EVENT_PARTIAL_UP = 9;    // a slot completed below the tree's root: its partial sum sent to the parent
const bit<32> AGG_EVENT_PARTIAL_AGAIN = 10;// a contribution to a completed partial: the partial sent up again
const bit<32> AGG_EVENT_RESULT_DOWN = 11;  // a result from the parent multicast to the children
const bit<32> AGG_EVENTS = 16;

// Lossless classes and PFC (lossless.p4, docs/features/lossless.md;
// wire/lossless.py holds the same values).
const bit<16> ETHERTYPE_MAC_CONTROL = 0x8808;
const bit<16> PFC_OPCODE = 0x0101;            // IEEE 802.1Qbb class-based flow control
const mac_addr_t PFC_DST_MAC = 0x0180C2000001;
const bit<32> PFC_FRAME_BYTES = 60;           // a minimum Ethernet frame, without its FCS
#define PFC_PORT_BITS 6                       // PFC runs on ports 0..63 (the control plane refuses others)
const bit<32> PFC_CELLS = 512;                // (port, class) cells: 6-bit port ++ 3-bit class
const bit<32> PFC_SESSION_BASE = 1024;        // clone session of PFC frames out of port p: base + p
const bit<8>  PFC_CARRY_FIELDS = 2;           // @field_list: what recirculation and frame clones keep
// local_metadata_t.pfc_carry: kind, then for a held packet its egress
// port, ingress port and hold number.
#define PFC_CARRY_KIND_HI 63
#define PFC_CARRY_KIND_LO 62
#define PFC_CARRY_PORT_HI 58
#define PFC_CARRY_PORT_LO 50
#define PFC_CARRY_IN_PORT_HI 49
#define PFC_CARRY_IN_PORT_LO 41
const bit<2>  PFC_KIND_HELD = 3;
const bit<64> PFC_CARRY_ADMITTED = 1 << 62;   // a lossless packet in the buffer model
const bit<64> PFC_CARRY_HELD = 3 << 62;       // held (recirculated); from here up egress does nothing else
const bit<64> PFC_CARRY_DONE = 0xFFFFFFFFFFFFFFFF;   // a packet dropped (or a frame for a port without PFC): nothing else to do
const bit<64> PFC_CARRY_FRAME = 0xFFFFFFFFFFFFFFFE;  // a PFC frame built: only the egress port counter still counts it
// local_metadata_t.pfc_frame: what a frame clone becomes, the class and its pause time.
#define PFC_FRAME_CLASS_HI 18
#define PFC_FRAME_CLASS_LO 16
// What the watchdog does in a storm (set_lossless_class's storm_action).
const bit<8>  PFC_STORM_DROP = 1;             // drop the class's packets, ignore pauses
const bit<8>  PFC_STORM_FORWARD = 2;          // ignore pauses
const bit<8>  PFC_STORM_ALERT = 3;            // count it, change nothing

// standard_metadata.instance_type of BMv2 (simple_switch.cpp)
typedef bit<32> instance_type_t;
const instance_type_t INSTANCE_NORMAL = 0;
const instance_type_t INSTANCE_INGRESS_CLONE = 1;
const instance_type_t INSTANCE_EGRESS_CLONE = 2;

#endif
