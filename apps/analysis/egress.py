"""Where Beacon may post a webhook, and what the answer means (issue 27, server-side forgery).

Pure: host text and addresses in, verdicts out. The one sender (apps/core/adapters/webhook.py)
resolves a URL's host once, asks ``check`` about every address it got, and connects to the
address that passed; forms ask ``check`` too when a URL is saved (apps/core/webhooks.py).

An address is refused when it is not a public unicast address: loopback, private (RFC 1918,
ULA fc00::/7), link-local, shared (CGNAT 100.64/10), unspecified, multicast, documentation,
benchmarking and other reserved blocks, and the cloud metadata services (169.254.169.254,
fd00:ec2::254), unless the admins' allow-list names it. IPv6 forms that carry an IPv4
address (IPv4-mapped ``::ffff:127.0.0.1``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) are
judged by the IPv4 address inside. ``parse_address`` reads every spelling ``inet_aton`` reads
(``2130706433``, ``0177.1``, ``0x7f.0.0.1``), because that is what the resolver would connect
to; the sender still checks what the resolver returned, so a spelling missed here is caught
there.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# What a user sees for every failure that could tell them what listens where: refused by the
# policy at send time, nobody listening, no answer in time, a name that does not resolve.
UNDELIVERED = "the webhook could not be delivered"


def _nets(*cidrs: str) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


# First match wins: the metadata addresses sit inside link-local and ULA, and get their own
# label so the log says what was aimed at.
_REFUSED: tuple[tuple[str, tuple[Network, ...]], ...] = (
    ("cloud metadata", _nets("169.254.169.254/32", "169.254.170.2/32", "fd00:ec2::254/128")),
    ("unspecified", _nets("0.0.0.0/8", "::/128")),
    ("loopback", _nets("127.0.0.0/8", "::1/128")),
    ("private", _nets("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7",
                      "fec0::/10")),
    ("shared (CGNAT)", _nets("100.64.0.0/10")),
    ("link-local", _nets("169.254.0.0/16", "fe80::/10")),
    ("multicast", _nets("224.0.0.0/4", "ff00::/8")),
    ("reserved", _nets("192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "198.18.0.0/15",
                       "198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4", "::/96",
                       "100::/64", "2001::/23", "2001:db8::/32")),
)
_NAT64 = _nets("64:ff9b::/96", "64:ff9b:1::/48")
# Names that mean this machine whatever DNS says (RFC 6761), and the metadata services' names.
_LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
_METADATA_NAMES = ("metadata.google.internal", "metadata.goog", "metadata")


# --- Addresses ---------------------------------------------------------------------------

_V4_PART = re.compile(r"^(?:0x[0-9a-f]*|0[0-7]*|[1-9][0-9]*)$", re.IGNORECASE)


def _inet_aton(text: str) -> ipaddress.IPv4Address | None:
    """IPv4 as the C library's ``inet_aton`` reads it: 1 to 4 parts, each decimal, octal
    (leading 0) or hex (0x); the last part fills the bytes left (``127.1``, ``2130706433``)."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4 or not all(_V4_PART.match(p) for p in parts):
        return None
    values = [int(p[2:] or "0", 16) if p[:2].lower() == "0x" else int(p, 8) if p[0] == "0"
              else int(p) for p in parts]
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    number = last
    for i, value in enumerate(head):
        number += value << (8 * (3 - i))
    return ipaddress.IPv4Address(number)


def parse_address(host: str) -> Address | None:
    """The address a URL's host spells, in any spelling a resolver accepts; None for a name.

    ``[::1]`` and ``::1`` alike; a zone (``fe80::1%eth0``) and one trailing dot are dropped.
    """
    text = host.strip().lower().removesuffix(".")
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text.split("%", 1)[0])
        except ValueError:
            return None
    return _inet_aton(text)


def embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, NAT64, 6to4), else None."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if any(address in net for net in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour


def category(address: Address) -> str:
    """Why ``address`` is not a public destination ("loopback", "private", ...), or ""."""
    inner = embedded_ipv4(address)
    if inner is not None:
        return category(inner)
    for label, networks in _REFUSED:
        if any(address in net for net in networks):
            return label
    # Anything else the registries do not call global (a block added after this table).
    return "" if address.is_global else "reserved"


def name_category(host: str) -> str:
    """What a host *name* means whatever DNS answers: "loopback" for localhost names,
    "cloud metadata" for the metadata services' names, else ""."""
    name = host.strip().lower().removesuffix(".")
    if name in _LOCAL_NAMES or name.endswith(".localhost"):
        return "loopback"
    return "cloud metadata" if name in _METADATA_NAMES else ""


# --- The allow-list -----------------------------------------------------------------------


@dataclass(frozen=True)
class AllowList:
    """The admins' exceptions (``BEACON_WEBHOOK_ALLOW``): host names (``chat.corp``), name
    suffixes (``*.corp.example``: any name under it), addresses and networks (CIDR)."""

    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    networks: tuple[Network, ...] = ()

    def admits(self, host: str, address: Address) -> str:
        """The entry that allows posting to ``address`` for a URL naming ``host``, or ""."""
        return self.admits_name(host) or self._admits_address(address)

    def admits_name(self, host: str) -> str:
        name = host.strip().lower().removesuffix(".").strip("[]")
        if name in self.names:
            return name
        return next((f"*.{s}" for s in self.suffixes if name.endswith("." + s)), "")

    def _admits_address(self, address: Address) -> str:
        inner = embedded_ipv4(address)
        candidates: list[Address] = [address] if inner is None else [address, inner]
        for net in self.networks:
            if any(a.version == net.version and a in net for a in candidates):
                return str(net)
        return ""


_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9_](?:[a-z0-9_-]{0,62})(?:\.[a-z0-9_-]{1,63})*$")


def parse_allow_list(entries: Iterable[str]) -> tuple[AllowList, list[str]]:
    """The allow-list and the entries that are neither a name, ``*.suffix``, an address nor a
    network (the system check names them)."""
    names: set[str] = set()
    suffixes: list[str] = []
    networks: list[Network] = []
    bad: list[str] = []
    for raw in entries:
        entry = raw.strip().lower().removesuffix(".")
        if not entry:
            continue
        if "/" in entry or parse_address(entry) is not None:
            try:
                address = parse_address(entry)
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False)
                                if address is None else ipaddress.ip_network(address))
            except ValueError:
                bad.append(raw)
        elif entry.startswith("*.") and _NAME.match(entry[2:]):
            suffixes.append(entry[2:])
        elif _NAME.match(entry):
            names.add(entry)
        else:
            bad.append(raw)
    return AllowList(frozenset(names), tuple(suffixes), tuple(networks)), bad


# --- The verdict on a destination ------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """Where to connect, or why not. ``allowed_by`` names the allow-list entry that let an
    internal address through (the sender logs it; saving a form audits it)."""

    address: Address | None
    refused: str = ""
    allowed_by: str = ""

    @property
    def ok(self) -> bool:
        return self.address is not None and not self.refused


def check(host: str, addresses: Sequence[Address], allow: AllowList = AllowList()) -> Verdict:
    """Judge every address ``host`` resolved to; connect to the first only if none is refused.

    Refusing when any address is internal (rather than picking a public one) keeps the rule
    the same for the form that saves a URL and the sender that uses it.
    """
    if not addresses:
        return Verdict(None, "no address")
    allowed_by = ""
    for address in addresses:
        label = category(address) or name_category(host)
        if not label:
            continue
        entry = allow.admits(host, address)
        if not entry:
            return Verdict(None, label)
        allowed_by = allowed_by or entry
    return Verdict(addresses[0], "", allowed_by)


def check_name(host: str, allow: AllowList = AllowList()) -> str:
    """The refusal a host name earns without DNS (localhost, metadata names), or ""."""
    label = name_category(host)
    return "" if not label or allow.admits_name(host) else label


# --- What an answer means ----------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """One HTTP answer, classified the same way for every webhook.

    ``reason`` is what a user may see; ``retry`` says whether trying later can help;
    ``retry_after`` is the server's Retry-After in seconds (capped), when it gave one.
    """

    delivered: bool
    retry: bool = False
    reason: str = ""
    retry_after: float | None = None


def retry_after_seconds(value: str | None, now: datetime, cap: float) -> float | None:
    """Retry-After as seconds from ``now`` (a number of seconds or an HTTP date), cut to
    ``[0, cap]``; None when absent or unreadable."""
    text = (value or "").strip()
    if not text:
        return None
    if text.isdigit():
        seconds = float(text)
    else:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None or now.tzinfo is None:
            return None
        seconds = (when - now).total_seconds()
    return min(max(seconds, 0.0), cap)


def answer_outcome(status: int, retry_after: str | None, now: datetime,
                   cap: float) -> Outcome:
    """2xx delivered; 429, 408 and 5xx worth another try later (honouring Retry-After);
    3xx a failure (redirects are not followed: a webhook that moved is reconfigured, and a
    redirect could point inside the network); any other answer refused the message."""
    if 200 <= status < 300:
        return Outcome(True)
    if 300 <= status < 400:
        return Outcome(False, False, f"the webhook answered with a redirect (HTTP {status}); "
                                     "redirects are not followed")
    if status == 429:
        return Outcome(False, True, "the webhook asked to slow down (HTTP 429)",
                       retry_after_seconds(retry_after, now, cap))
    if status == 408 or status >= 500:
        return Outcome(False, True, f"the webhook failed (HTTP {status})",
                       retry_after_seconds(retry_after, now, cap))
    return Outcome(False, False, f"the webhook refused the message (HTTP {status})")
