"""Property, concurrency and network-fault tests of the engine against a real redis-server."""
