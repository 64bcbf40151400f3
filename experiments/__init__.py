"""Experiments, one module each, run by name: `fabric experiment NAME`
(or `python -m experiments.NAME`). Each writes CSV + PNG and prints where
they went; shared helpers are in common.py."""
