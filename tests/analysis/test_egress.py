"""The webhook egress policy (issue 27) as tables: how a host is spelt, what each address is,
what the allow-list lets through, and what an HTTP answer means."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime

import pytest

from apps.analysis.egress import (
    UNDELIVERED,
    AllowList,
    answer_outcome,
    category,
    check,
    check_name,
    parse_address,
    parse_allow_list,
    retry_after_seconds,
)

ip = ipaddress.ip_address
ZERO = "0.0.0.0"  # noqa: S104  (an address under test, nothing binds to it)
NOW = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


# --- Spellings: every way a resolver would read an address ----------------------------------

@pytest.mark.parametrize(("host", "address"), [
    ("127.0.0.1", "127.0.0.1"),
    ("127.0.0.1.", "127.0.0.1"),          # a trailing dot
    ("2130706433", "127.0.0.1"),          # one decimal number
    ("0x7f000001", "127.0.0.1"),          # one hex number
    ("017700000001", "127.0.0.1"),        # one octal number
    ("0177.0.0.1", "127.0.0.1"),          # octal part
    ("0x7f.0.0.1", "127.0.0.1"),          # hex part
    ("0X7F.1", "127.0.0.1"),              # two parts, upper-case hex
    ("127.1", "127.0.0.1"),               # the last part fills the bytes left
    ("127.0.1", "127.0.0.1"),
    ("0", ZERO),
    ("0x", ZERO),                    # glibc reads a bare 0x as 0
    ("169.254.43518", "169.254.169.254"),  # metadata, two bytes in one part
    ("2852039166", "169.254.169.254"),
    ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
    ("10.1", "10.0.0.1"),
    ("[::1]", "::1"),
    ("::1", "::1"),
    ("[0:0:0:0:0:0:0:1]", "::1"),
    ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),
    ("[::ffff:7f00:1]", "::ffff:7f00:1"),
    ("[fe80::1%eth0]", "fe80::1"),        # a zone is dropped
    ("[FD00:EC2::254]", "fd00:ec2::254"),
    ("8.8.8.8", "8.8.8.8"),
])
def test_every_spelling_of_an_address_is_read(host, address):
    assert parse_address(host) == ip(address)


@pytest.mark.parametrize("host", [
    "example.org", "hooks.slack.com", "localhost", "08", "0x7g.0.0.1", "1.2.3.4.5", "256.1",
    "1.16777216", "1.2.3.256", "[::1", "[zz::1]", "", "0.0.0.0.0",
])
def test_names_and_broken_spellings_are_not_addresses(host):
    assert parse_address(host) is None


# --- What each address is ------------------------------------------------------------------

@pytest.mark.parametrize(("address", "label"), [
    ("127.0.0.1", "loopback"), ("127.255.1.2", "loopback"), ("::1", "loopback"),
    ("10.0.0.1", "private"), ("172.16.5.4", "private"), ("172.31.255.255", "private"),
    ("192.168.1.1", "private"), ("fc00::1", "private"), ("fd12:3456::1", "private"),
    ("fec0::1", "private"),
    ("169.254.169.254", "cloud metadata"), ("fd00:ec2::254", "cloud metadata"),
    ("169.254.170.2", "cloud metadata"),
    ("169.254.1.1", "link-local"), ("fe80::1", "link-local"),
    ("100.64.0.1", "shared (CGNAT)"), ("100.127.255.254", "shared (CGNAT)"),
    (ZERO, "unspecified"), ("0.1.2.3", "unspecified"), ("::", "unspecified"),
    ("224.0.0.1", "multicast"), ("239.255.255.250", "multicast"), ("ff02::1", "multicast"),
    ("240.0.0.1", "reserved"), ("255.255.255.255", "reserved"), ("192.0.2.1", "reserved"),
    ("198.18.0.1", "reserved"), ("203.0.113.7", "reserved"), ("2001:db8::1", "reserved"),
    ("100::1", "reserved"), ("::127.0.0.1", "reserved"),
    # IPv6 forms carrying an IPv4 address are judged by it
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:169.254.169.254", "cloud metadata"),
    ("::ffff:10.0.0.1", "private"), ("64:ff9b::a9fe:a9fe", "cloud metadata"),
    ("64:ff9b::7f00:1", "loopback"), ("2002:7f00:1::", "loopback"),
    ("2002:c0a8:101::1", "private"),
    # public
    ("8.8.8.8", ""), ("93.184.216.34", ""), ("100.63.255.255", ""), ("100.128.0.0", ""),
    ("172.32.0.1", ""), ("2606:4700::1111", ""), ("::ffff:8.8.8.8", ""),
    ("64:ff9b::808:808", ""),
])
def test_each_address_has_its_category(address, label):
    assert category(ip(address)) == label


@pytest.mark.parametrize(("host", "label"), [
    ("localhost", "loopback"), ("LOCALHOST.", "loopback"), ("app.localhost", "loopback"),
    ("ip6-localhost", "loopback"), ("metadata.google.internal", "cloud metadata"),
    ("hooks.slack.com", ""), ("localhost.example.org", ""),
])
def test_some_names_are_refused_whatever_dns_says(host, label):
    assert check_name(host) == label


# --- The allow-list ------------------------------------------------------------------------

ALLOW, BAD = parse_allow_list([
    "chat.corp.example", "*.internal.example", "10.20.0.0/16", "127.0.0.1", "[fd00::5]",
    " ", "not a name", "10.0.0.0/33", "*.", "metadata.",
])


def test_the_allow_list_reads_names_suffixes_addresses_and_networks():
    assert ALLOW.names == {"chat.corp.example", "metadata"}
    assert ALLOW.suffixes == ("internal.example",)
    assert [str(n) for n in ALLOW.networks] == ["10.20.0.0/16", "127.0.0.1/32", "fd00::5/128"]
    assert BAD == ["not a name", "10.0.0.0/33", "*."]


@pytest.mark.parametrize(("host", "addresses", "refused", "allowed_by"), [
    # public: no entry needed
    ("hooks.slack.com", ["34.1.2.3"], "", ""),
    # internal, refused
    ("evil.example", ["169.254.169.254"], "cloud metadata", ""),
    ("10.0.0.1", ["10.0.0.1"], "private", ""),
    ("localhost", ["127.0.0.2"], "loopback", ""),
    ("[::1]", ["::1"], "loopback", ""),
    ("localhost", ["8.8.8.8"], "loopback", ""),  # a localhost name is never public
    # one internal address among public ones refuses the whole name (no picking)
    ("mixed.example", ["8.8.8.8", "10.0.0.9"], "private", ""),
    # internal, allowed by an entry: by name, by suffix, by network, by address
    ("chat.corp.example", ["10.9.9.9"], "", "chat.corp.example"),
    ("CHAT.corp.example.", ["10.9.9.9"], "", "chat.corp.example"),
    ("mm.internal.example", ["192.168.3.3"], "", "*.internal.example"),
    ("internal.example", ["192.168.3.3"], "private", ""),  # the suffix, not the bare name
    ("hook.example", ["10.20.4.5"], "", "10.20.0.0/16"),
    ("hook.example", ["::ffff:10.20.4.5"], "", "10.20.0.0/16"),  # mapped form, same network
    ("hook.example", ["10.21.4.5"], "private", ""),
    ("127.0.0.1", ["127.0.0.1"], "", "127.0.0.1/32"),
    ("2130706433", ["127.0.0.1"], "", "127.0.0.1/32"),
    ("127.0.0.2", ["127.0.0.2"], "loopback", ""),
    ("[fd00::5]", ["fd00::5"], "", "fd00::5/128"),
    # nothing resolved
    ("nowhere.example", [], "no address", ""),
])
def test_check_judges_every_resolved_address(host, addresses, refused, allowed_by):
    verdict = check(host, [ip(a) for a in addresses], ALLOW)
    assert (verdict.refused, verdict.allowed_by) == (refused, allowed_by)
    assert verdict.ok == (not refused)
    assert verdict.address == (ip(addresses[0]) if not refused else None)


def test_an_empty_allow_list_allows_only_public_addresses():
    assert check("a.example", [ip("1.1.1.1")], AllowList()).ok
    assert not check("a.example", [ip("127.0.0.1")], AllowList()).ok


# --- What an answer means ------------------------------------------------------------------

@pytest.mark.parametrize(("status", "retry_after", "delivered", "retry", "words", "wait"), [
    (200, None, True, False, "", None),
    (204, None, True, False, "", None),
    (301, None, False, False, "redirects are not followed", None),
    (302, None, False, False, "redirects are not followed", None),
    (307, None, False, False, "redirects are not followed", None),
    (429, None, False, True, "asked to slow down (HTTP 429)", None),
    (429, "120", False, True, "asked to slow down (HTTP 429)", 120.0),
    (429, "99999", False, True, "asked to slow down (HTTP 429)", 3600.0),  # capped
    (429, "Mon, 02 Nov 2026 08:05:00 GMT", False, True, "HTTP 429", 300.0),
    (429, "Mon, 02 Nov 2026 07:00:00 GMT", False, True, "HTTP 429", 0.0),  # in the past
    (429, "soon", False, True, "HTTP 429", None),
    (503, "30", False, True, "the webhook failed (HTTP 503)", 30.0),
    (500, None, False, True, "the webhook failed (HTTP 500)", None),
    (408, None, False, True, "HTTP 408", None),
    (400, None, False, False, "the webhook refused the message (HTTP 400)", None),
    (404, None, False, False, "the webhook refused the message (HTTP 404)", None),
    (410, "60", False, False, "refused the message (HTTP 410)", None),
])
def test_every_answer_is_classified_one_way(status, retry_after, delivered, retry, words, wait):
    outcome = answer_outcome(status, retry_after, NOW, cap=3600)
    assert (outcome.delivered, outcome.retry, outcome.retry_after) == (delivered, retry, wait)
    assert words in outcome.reason


@pytest.mark.parametrize(("value", "seconds"), [
    (None, None), ("", None), ("0", 0.0), (" 45 ", 45.0), ("-5", None), ("1.5", None),
    ("Mon, 02 Nov 2026 08:00:30 GMT", 30.0), ("garbage", None),
])
def test_retry_after_is_read_as_seconds_or_a_date(value, seconds):
    assert retry_after_seconds(value, NOW, cap=600) == seconds


def test_the_undelivered_message_names_nothing():
    assert UNDELIVERED == "the webhook could not be delivered"
