"""The P4Runtime control plane and the fabric model it computes from:
the topology model, loader and generators, base forwarding (routes and
resilient ECMP), P4Info, switch connections with their arbitration and
mutual TLS, reconciliation (sync.py), the multi-switch controller, the
probe planner and central routing's path assignment, and the feature
contract (feature.py). Imports `wire` only from the project."""
