"""The emulated fabric on real tools: the P4 toolchain and build, BMv2's
command line and Thrift runtime (what P4Runtime cannot reach), the network
launcher (namespaces, veths, switch processes, link impairments) and the
switch supervisor. Imports `wire` and `control` only from the project."""
