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


def split_credentials(authority: str) -> tuple[str | None, str | None, str]:
    """Split a multi-host URL's ``[user[:password]@]hosts`` into user, password and hosts.

    urllib cannot parse an authority with several hosts, so the cluster and the Sentinel URLs
    (shared.settings.config) both split it here: the last ``@`` ends the credentials, which are
    percent-decoded; an empty user is none, and a password is there only after a colon.
    """
    userinfo, at, hosts = authority.rpartition("@")
    if not at:
        return None, None, hosts
    user, colon, secret = userinfo.partition(":")
    return unquote(user) or None, unquote(secret) if colon else None, hosts


def parse_cluster_url(url: str) -> ClusterUrl:
    """Parse a cluster URL; raise ValueError (naming the expected form) if it is not one."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise ValueError(EXPECTED)
    authority, _, path = rest.partition("/")
    if path.strip("/") not in ("", "0"):
        raise ValueError(f"{EXPECTED}: a cluster has database 0 only")
    username, password, hosts = split_credentials(authority)
    seeds = []
    for entry in hosts.split(","):
        host, colon, port = entry.strip().rpartition(":")
        host = host.strip("[]")  # [::1]:7000
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(EXPECTED)
        seeds.append((host, int(port)))
    return ClusterUrl(tuple(seeds), username, password, scheme.lower() == "rediss+cluster")
