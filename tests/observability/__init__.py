"""Observability tests: metrics, stats and logs agree with each other and with Redis."""
