"""The engine: every state change one Lua script (lua/), called through shared.engine.scripts;
keys, result types, replies, history, events and the start-up checks."""
