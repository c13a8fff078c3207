"""Route pipelined Lua script calls by their keys on a cluster, without asking any node.

redis-py's cluster pipeline finds the keys of a command it has no routing flag for (EVALSHA,
EVAL) by sending ``COMMAND GETKEYS`` to the client's default node, a master picked at random.
While that master fails over, every pipelined script then fails with its connection error,
whatever slot the script's keys are in: ``GET /jobs?queue=reports`` answered 503 with only
``emails``' master down. A script call names its keys itself (``EVALSHA sha numkeys key...``),
and redis-py's own slot lookup reads them from the arguments, so we give the pipeline a policy
that says so. (A call outside a pipeline already routes this way.)
"""

from __future__ import annotations

from typing import Any

from redis._parsers.commands import CommandPolicies, RequestPolicy, ResponsePolicy
from redis.commands.policies import BasePolicyResolver, PolicyResolver, StaticPolicyResolver

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


def route_scripts_by_keys(client: Any) -> None:
    """Make every pipeline of cluster `client` route script calls by their keys.

    The cluster client does not hand its policy resolver to the pipelines it makes, so its
    ``pipeline`` method is wrapped on this one client (idempotent).
    """
    if getattr(client, "_scripts_by_keys", False):
        return
    make = client.pipeline

    def pipeline(*args: Any, **kwargs: Any) -> Any:
        pipe = make(*args, **kwargs)
        pipe._policy_resolver = ScriptsByKeys()
        return pipe

    client.pipeline = pipeline
    client._scripts_by_keys = True
