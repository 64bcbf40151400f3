// Baseline for `make bench`: the least a v1model program can do. Packets
// entering port 1 leave on port 2 and vice versa; nothing is parsed.
#include <core.p4>
#include <v1model.p4>

header ethernet_t {
    bit<48> dst_addr;
    bit<48> src_addr;
    bit<16> ether_type;
}
struct headers_t { ethernet_t ethernet; }
struct metadata_t { }

parser BaselineParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                      inout standard_metadata_t std_meta) {
    state start { transition accept; }
}

control NoChecksum(inout headers_t hdr, inout metadata_t meta) { apply { } }

control BaselineIngress(inout headers_t hdr, inout metadata_t meta,
                        inout standard_metadata_t std_meta) {
    apply {
        std_meta.egress_spec = (std_meta.ingress_port == 1) ? (bit<9>) 2 : (bit<9>) 1;
    }
}

control BaselineEgress(inout headers_t hdr, inout metadata_t meta,
                       inout standard_metadata_t std_meta) { apply { } }

control BaselineDeparser(packet_out packet, in headers_t hdr) { apply { } }

V1Switch(BaselineParser(), NoChecksum(), BaselineIngress(), BaselineEgress(),
         NoChecksum(), BaselineDeparser()) main;
