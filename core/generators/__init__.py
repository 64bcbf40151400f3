"""Topology generators: the shipped topologies/fat-tree-k4.yaml, rail-optimized.yaml and dual-plane.yaml are their output (`fabric generate`)."""
