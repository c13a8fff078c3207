"""Observability with no Redis: the log schema, metric names, spans."""
