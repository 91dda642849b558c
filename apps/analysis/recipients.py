"""Whom to tell about a Slurm user's job: an e-mail address, or the reason there is none (pure).

The mapping from a Slurm user to a person, in order (docs/diagnosis.md, "Who hears"):

1. the portal user the job is linked to (by Slurm user name: ``Profile.slurm_username``,
   else the user name), with their e-mail: LDAP's ``mail`` and OIDC's ``email`` claim fill
   it at each sign-in, an admin may set it;
2. the site's e-mail domain rule (setting ``BEACON_EMAIL_DOMAIN``): ``<Slurm user>@<domain>``,
   for sites where Slurm names are mail names, and for people who never signed in;
3. nobody: the reason says which of the two was missing, so a run can say for whom
   (issue 28: 20 alerts stored unsent, and the run printed only "messages 0").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# What a mail domain may look like: labels of letters, digits and hyphens, dot-separated.
_DOMAIN = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                     r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
# A local part Beacon builds from a Slurm user name: POSIX user names are within it.
_LOCAL = re.compile(r"^[A-Za-z0-9._%+-]{1,64}$")
ACCOUNT, DOMAIN_RULE = "account", "domain"


@dataclass(frozen=True)
class Recipient:
    """An address and where it came from, or ``reason``: why there is none."""

    email: str = ""
    source: str = ""  # account, domain
    reason: str = ""


def valid_domain(domain: str) -> bool:
    """A mail domain (``example.org``), without the ``@``."""
    return bool(_DOMAIN.match(domain))


def recipient(slurm_user: str, linked_user: str | None, user_email: str,
              domain: str = "") -> Recipient:
    """The address for a job of ``slurm_user``.

    ``linked_user``: the portal user the job is linked to (None: no portal user has that
    Slurm name); ``user_email``: that user's e-mail; ``domain``: ``BEACON_EMAIL_DOMAIN``.
    """
    if linked_user is not None and user_email:
        return Recipient(user_email, ACCOUNT)
    if domain and _LOCAL.match(slurm_user):
        return Recipient(f"{slurm_user}@{domain}", DOMAIN_RULE)
    who = (f"Slurm user {slurm_user!r} matches no portal user" if linked_user is None
           else f"portal user {linked_user!r} (Slurm user {slurm_user!r}) has no e-mail address")
    if domain:
        return Recipient(reason=f"{who}, and {slurm_user!r} cannot be made an address at "
                                f"{domain}")
    return Recipient(reason=f"{who}, and no e-mail domain rule is set (BEACON_EMAIL_DOMAIN)")
