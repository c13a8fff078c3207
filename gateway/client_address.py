"""Which client a request came from: the peer, or what a trusted proxy says it forwarded.

``X-Forwarded-For`` is believed only when the request's peer is one of the proxies named in
TASKFORGE_TRUSTED_PROXIES, and then only as far as the chain of trusted proxies goes: reading
from the right (each proxy appends the address it saw), the first address that is not itself a
trusted proxy is the client. Anything to its left was written by the client and may be a lie.
Without trusted proxies, or from any other peer, the header is ignored: a client cannot choose
whose failed logins it is counted as (gateway/lockout.py), and behind a proxy one attacker
does not lock out everyone the proxy serves.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
UNKNOWN = "unknown"  # a peer without an IP address (a unix socket)
# One IPv6 host commonly holds a whole /64: counting per address would give it 2^64 tries.
IPV6_COUNTED_PREFIX = 64


def parse_address(text: str) -> Address | None:
    """Return the IP address in ``text`` (``1.2.3.4``, ``1.2.3.4:80``, ``[::1]:80``), or None."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]  # IPv4 with a port, as some proxies write it
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped  # ::ffff:1.2.3.4 is 1.2.3.4
    return address


def _trusted(address: Address, proxies: tuple[Network, ...]) -> bool:
    return any(address in network for network in proxies)


def client_address(environ: Mapping[str, Any], proxies: tuple[Network, ...]) -> str:
    """Return the address a request is counted and logged as (see the module's docstring)."""
    peer = parse_address(environ.get("REMOTE_ADDR") or "")
    if peer is None:
        return UNKNOWN
    forwarded = environ.get("HTTP_X_FORWARDED_FOR")
    if not proxies or not forwarded or not _trusted(peer, proxies):
        return str(peer)
    client = peer
    for hop in reversed(forwarded.split(",")):
        address = parse_address(hop)
        if address is None:
            break  # a trusted proxy wrote something else: the last address it vouched for
        client = address
        if not _trusted(address, proxies):
            break
    return str(client)


def counted_as(client: str) -> str:
    """Return what failures are counted under: the address, or an IPv6 address's /64."""
    address = parse_address(client)
    if isinstance(address, ipaddress.IPv6Address):
        network = ipaddress.IPv6Network((address, IPV6_COUNTED_PREFIX), strict=False)
        return str(network)
    return client
