"""Helpers that tests/ and bench/ share, one copy each.

- ``tools``: free_port, wait_until, require_tool / in_ci, process state from /proc.
- ``redis_server``: a private redis-server (config, freeze/thaw, kill -9, restart, stop).
- ``gunicorn``: the gateway under real gunicorn with deploy/gunicorn.conf.py.
- ``workerd``: a real ``python -m workerd`` supervisor, its logs and its processes.
- ``stats``: the one percentile definition of every published figure.
- ``tcp_proxy``: network fault injection between a client and a server.
"""
