"""The outcome-write limit of handlers_write_limit's worker processes, apart from that module:
importing it sets the limit in the importing process, which a test process must not do (every
in-process worker of that pytest worker would then run under it)."""

WRITE_LIMIT = 1.0  # seconds
