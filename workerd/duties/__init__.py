"""The supervisor's small duties besides fork, reap, respawn and kill.

Each is an object with ``tick(now)``, called once per step of the supervisor's loop with the
loop's clock, plus hooks for the events it cares about (a worker's death, the drain). They
never sleep and never fork: a tick does at most one Redis call per duty, so a step stays short.
"""
