"""Host side of INT: source-routed probes that cover every link (probes.py)."""
