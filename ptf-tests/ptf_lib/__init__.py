"""Helpers for the PTF data-plane tests (imported by tests, never collected)."""
