"""The engine both processes share, in layers (docs/ARCHITECTURE.md): model, settings, obs,
connect, engine, read; each imports only those before it (tests/test_layout.py)."""
