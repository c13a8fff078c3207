"""Route pipelined Lua script calls by their keys on a cluster, without asking any node.

redis-py's cluster pipeline finds the keys of a command it has no routing flag for (EVALSHA,
EVAL) by sending ``COMMAND GETKEYS`` to the client's default node, a master picked at random.
While that master fails over, every pipelined script then fails with its connection error,
whatever slot the script's keys are in: ``GET /jobs?queue=reports`` answered 503 with only
``emails``' master down. A script call names its keys itself (``EVALSHA sha numkeys key...``),
and redis-py's own slot lookup reads them from the arguments, so every pipeline of our cluster
client (shared.connect.redis_conn.TaskForgeCluster.pipeline) gets a policy that says so. (A call
outside a pipeline already routes this way.)
"""

from __future__ import annotations

from redis.commands.policies import (
    BasePolicyResolver,
    CommandPolicies,
    PolicyResolver,
    RequestPolicy,
    ResponsePolicy,
    StaticPolicyResolver,
)

_KEYED = CommandPolicies(
    request_policy=RequestPolicy.DEFAULT_KEYED, response_policy=ResponsePolicy.DEFAULT_KEYED
)
SCRIPT_POLICIES = {"core": {"evalsha": _KEYED, "eval": _KEYED}}


class ScriptsByKeys(BasePolicyResolver):
    """redis-py's static policies, with EVAL and EVALSHA routed by the keys they name."""

    def __init__(self, fallback: PolicyResolver | None = None) -> None:
        super().__init__(SCRIPT_POLICIES, fallback or StaticPolicyResolver())

    def with_fallback(self, fallback: PolicyResolver) -> PolicyResolver:
        return ScriptsByKeys(fallback)


SCRIPTS_BY_KEYS = ScriptsByKeys()  # holds no state: one serves every pipeline
