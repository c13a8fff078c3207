"""Fault-injection suite (issue 7): a harness, a loss/duplicate checker, and scenarios."""
