// IPv4 header checksum: verified on arrival (a bad one sets
// standard_metadata.checksum_error, and ingress drops the packet), and
// recomputed on departure after TTL (and, later, ECN/DSCP) rewrites.
#ifndef CHECKSUMS_P4
#define CHECKSUMS_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

#define IPV4_CHECKSUM_FIELDS(h) \
    { h.version, h.ihl, h.dscp, h.ecn, h.total_len, h.identification, \
      h.flags, h.frag_offset, h.ttl, h.protocol, h.src_addr, h.dst_addr }

control VerifyIpv4Checksum(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        verify_checksum(hdr.ipv4.isValid(), IPV4_CHECKSUM_FIELDS(hdr.ipv4),
                        hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

control ComputeIpv4Checksum(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(), IPV4_CHECKSUM_FIELDS(hdr.ipv4),
                        hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

#endif
