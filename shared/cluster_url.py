"""Redis Cluster URLs: ``redis+cluster://[user:password@]host:port[,host:port…]``.

One setting, REDIS_URL, names how every process reaches Redis, so a cluster is a URL scheme
rather than a second switch that could disagree with it: ``rediss+cluster://`` for TLS. The
hosts are seed nodes (masters or replicas): the client asks the first that answers for the
slot map and finds the rest itself, so naming a few lets a process start while one is down.
No database number: a cluster has only database 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

SCHEMES = ("redis+cluster", "rediss+cluster")
EXPECTED = "a redis+cluster://host:port[,host:port...] URL"


@dataclass(frozen=True)
class ClusterUrl:
    """What a cluster URL says: seed nodes, credentials, and whether to use TLS."""

    seeds: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    tls: bool


def is_cluster_url(url: str) -> bool:
    """Tell whether `url` names a Redis Cluster."""
    return url.partition("://")[0].lower() in SCHEMES


def parse_cluster_url(url: str) -> ClusterUrl:
    """Parse a cluster URL; raise ValueError (naming the expected form) if it is not one."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise ValueError(EXPECTED)
    authority, _, path = rest.partition("/")
    if path.strip("/") not in ("", "0"):
        raise ValueError(f"{EXPECTED}: a cluster has database 0 only")
    userinfo, at, hosts = authority.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    seeds = []
    for entry in hosts.split(","):
        host, colon, port = entry.strip().rpartition(":")
        host = host.strip("[]")  # [::1]:7000
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(EXPECTED)
        seeds.append((host, int(port)))
    return ClusterUrl(tuple(seeds), username, password, scheme.lower() == "rediss+cluster")
