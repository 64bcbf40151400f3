// IPv4 header checksum: verified on arrival (a bad one sets
// standard_metadata.checksum_error, and ingress drops the packet), and
// recomputed on departure after TTL (and, later, ECN/DSCP) rewrites.
#ifndef CHECKSUMS_P4
#define CHECKSUMS_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

#define IPV4_CHECKSUM_FIELDS(h) \
    { h.version_ihl, h.dscp, h.ecn, h.total_len, h.id_flags_frag, \
      h.ttl, h.protocol, h.src_addr, h.dst_addr }

control VerifyIpv4Checksum(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        verify_checksum(hdr.ipv4.isValid(), IPV4_CHECKSUM_FIELDS(hdr.ipv4),
                        hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

// The INT bytes a TCP/UDP checksum covers: every INT header (invalid ones
// add nothing). The payload follows them.
#define INT_CHECKSUM_HEADERS(h) \
    h.int_shim, h.int_md, h.int_hop16, h.int_hop8, h.int_hop4, h.int_hop2, h.int_hop1, h.int_stack

// IPv4 header checksum, and the TCP/UDP checksum of packets whose length
// INT changed (source, transit, sink): meta.telemetry.l4_checksum. A zero UDP
// checksum (none) stays zero.
control ComputeIpv4Checksum(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(), IPV4_CHECKSUM_FIELDS(hdr.ipv4),
                        hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
#ifndef WITHOUT_INT_TELEMETRY
        update_checksum_with_payload(meta.telemetry.l4_checksum == 1 && hdr.udp.isValid() && hdr.udp.checksum != 0,
            { hdr.ipv4.src_addr, hdr.ipv4.dst_addr, 8w0, hdr.ipv4.protocol, hdr.udp.length,
              hdr.udp.src_port, hdr.udp.dst_port, hdr.udp.length, INT_CHECKSUM_HEADERS(hdr) },
            hdr.udp.checksum, HashAlgorithm.csum16);
        update_checksum_with_payload(meta.telemetry.l4_checksum == 1 && hdr.tcp.isValid(),
            { hdr.ipv4.src_addr, hdr.ipv4.dst_addr, 8w0, hdr.ipv4.protocol, meta.int_scratch.l4_length,
              hdr.tcp.src_port, hdr.tcp.dst_port, hdr.tcp.seq_no, hdr.tcp.ack_no, hdr.tcp.data_offset,
              hdr.tcp.reserved, hdr.tcp.flags, hdr.tcp.window, hdr.tcp.urgent_ptr, hdr.tcp_options,
              INT_CHECKSUM_HEADERS(hdr) },
            hdr.tcp.checksum, HashAlgorithm.csum16);
#endif
    }
}

#endif
