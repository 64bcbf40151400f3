"""Control plane of the fabric: topologies, the BMv2 network launcher, the
multi-switch P4Runtime controller and BMv2's Thrift runtime."""
