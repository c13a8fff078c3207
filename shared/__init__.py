"""The engine both sides share: configuration, Redis, jobs, Lua scripts, logging."""
