"""workerd: the supervisor, its worker processes and the scheduler.

Handler modules use ``from workerd import handler, PermanentError`` (and ``JobCanceled``, what
a cancel raises inside a running handler: docs/JOBS.md).
"""

from workerd.handler_registry import JobCanceled, JobContext, PermanentError, handler

__all__ = ["JobCanceled", "JobContext", "PermanentError", "handler"]
