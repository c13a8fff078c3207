"""Real-process tests of workerd: a real supervisor, real children, a real redis-server."""
