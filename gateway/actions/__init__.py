"""The operator actions, once: what the JSON views and the dashboard's forms both do.

One function per action (replay, purge, bulk DLQ, cancel; pause, resume and delete a queue,
its limits; quiet and resume a host; pause and resume a schedule). Each takes parsed inputs
and who asked, changes the engine, logs and records what it did, and returns what happened or
raises one of gateway.actions.action_errors. The views only translate: the API into status codes and
JSON bodies (gateway.http_errors), the dashboard into flash messages, redirects and error pages.
Reading things back to show them is the views' part, not the actions'.
"""
