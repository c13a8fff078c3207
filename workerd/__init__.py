"""workerd: the supervisor, its worker processes and the scheduler.

Handler modules use ``from workerd import handler, PermanentError``.
"""

from workerd.registry import JobContext, PermanentError, handler

__all__ = ["JobContext", "PermanentError", "handler"]
