"""Whom to tell about a Slurm user's job: an address, or the reason there is none."""

from __future__ import annotations

import pytest

from apps.analysis.recipients import Recipient, recipient, valid_domain


@pytest.mark.parametrize(("args", "expected"), [
    # the linked portal user's own address wins
    (("ann", "ann", "ann@lab.example", "example.org"), Recipient("ann@lab.example", "account")),
    (("ann", "a.smith", "ann@lab.example", ""), Recipient("ann@lab.example", "account")),
    # no portal user, or one without an address: the domain rule, from the Slurm name
    (("ann", None, "", "example.org"), Recipient("ann@example.org", "domain")),
    (("ann", "a.smith", "", "example.org"), Recipient("ann@example.org", "domain")),
    (("svc.train-01", None, "", "example.org"), Recipient("svc.train-01@example.org", "domain")),
])
def test_it_finds_the_address_in_order(args, expected):
    assert recipient(*args) == expected


@pytest.mark.parametrize(("args", "words"), [
    (("ann", None, "", ""), "Slurm user 'ann' matches no portal user, and no e-mail domain "
                            "rule is set (BEACON_EMAIL_DOMAIN)"),
    (("ann", "a.smith", "", ""), "portal user 'a.smith' (Slurm user 'ann') has no e-mail "
                                 "address, and no e-mail domain rule is set"),
    (("", None, "", "example.org"), "cannot be made an address at example.org"),
    (("ann smith", None, "", "example.org"), "'ann smith' cannot be made an address"),
    (("ann@evil.example", None, "", "example.org"), "cannot be made an address"),
])
def test_without_an_address_it_says_why(args, words):
    found = recipient(*args)
    assert found.email == "" and found.source == ""
    assert words in found.reason


@pytest.mark.parametrize(("domain", "ok"), [
    ("example.org", True), ("mail.lab-1.example.org", True), ("localdomain", True),
    ("", False), ("@example.org", False), ("example..org", False), ("-bad.org", False),
    ("exa mple.org", False), ("example.org/x", False),
])
def test_a_domain_is_checked(domain, ok):
    assert valid_domain(domain) is ok
