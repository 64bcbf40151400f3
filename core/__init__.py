"""The control core: the P4 toolchain and build, P4Info and P4Runtime
connections, state reconciliation, BMv2's command line and Thrift, the
topology model, loader and routing, the network launcher (namespaces,
veths, switches), and the feature contract (feature.py). Imports `wire`
only from the project."""
