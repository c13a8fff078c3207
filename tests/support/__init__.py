"""Helpers that several test suites share (network fault injection)."""
