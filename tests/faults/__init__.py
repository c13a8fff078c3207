"""Fault-injection suite (docs/RELIABILITY.md): a harness, a loss/duplicate checker, and scenarios."""
