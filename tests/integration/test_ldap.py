"""LDAP sign-in against a real OpenLDAP (Debian's slapd, started here on a free loopback port).

The settings come from LDAP_* variables through ``portal.sso.ldap_settings``, exactly
as in production; only the server address is this test's own.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from apps.accounts.models import Membership, Profile, Team
from apps.audit.models import AuditEvent
from apps.jobs.models import Job
from portal import settings as portal_settings
from tests.conftest import make_job
from tests.integration.services import require

pytestmark = pytest.mark.integration("ldap")

SEED = Path(__file__).resolve().parents[1] / "fixtures" / "ldap" / "seed.ldif"
BASE = "dc=example,dc=org"
SLAPD = shutil.which("slapd") or "/usr/sbin/slapd"
INSTALL = ("echo 'slapd slapd/no_configuration boolean true' | debconf-set-selections && "
           "apt-get install -y slapd ldap-utils")
SLAPD_CONF = "\n".join([
    *(f"include /etc/ldap/schema/{s}.schema" for s in ("core", "cosine", "nis", "inetorgperson")),
    "modulepath /usr/lib/ldap", "moduleload back_mdb", "database mdb", "maxsize 104857600",
    f'suffix "{BASE}"', f'rootdn "cn=admin,{BASE}"', "rootpw adminpw", "directory {data}",
    "access to attrs=userPassword by anonymous auth by self write by * none",
    "access to * by * read", "",
])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def ldap_uri(tmp_path_factory: Any) -> Iterator[str]:
    """One throwaway slapd for the session, in the foreground (-d 0) so it dies with us."""
    require(Path(SLAPD).exists() and bool(shutil.which("ldapwhoami")), "slapd", INSTALL)
    folder = tmp_path_factory.mktemp("slapd")
    (folder / "data").mkdir()
    conf = folder / "slapd.conf"
    conf.write_text(SLAPD_CONF.format(data=folder / "data"))
    subprocess.run(["slapadd", "-q", "-f", str(conf), "-l", str(SEED)], check=True)
    uri = f"ldap://127.0.0.1:{_free_port()}"
    proc = subprocess.Popen([SLAPD, "-d", "0", "-f", str(conf), "-h", f"{uri}/"])
    try:
        _wait_for(uri)
        yield uri
    finally:
        proc.terminate()
        proc.wait(10)


def _wait_for(uri: str) -> None:
    for _ in range(100):
        if subprocess.run(["ldapwhoami", "-x", "-H", uri], capture_output=True).returncode == 0:
            return
        time.sleep(0.05)
    pytest.fail("slapd did not start")


def _use_ldap(settings: Any, monkeypatch: Any, **env: str) -> None:
    """Apply LDAP_* variables the way portal/settings.py does at start-up."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name, value in portal_settings.ldap_settings().items():
        setattr(settings, name, value)
    settings.AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend",
                                        "apps.accounts.auth.BeaconLDAPBackend",
                                        "django.contrib.auth.backends.ModelBackend"]
    settings.SSO_TEAM_GROUPS = portal_settings.sso_team_groups("nlp-users:nlp,nlp-leads:nlp:lead")
    settings.SSO_ADMIN_GROUPS = ["portal-admins"]


@pytest.fixture
def direct_bind(ldap_uri, settings, monkeypatch, db):
    _use_ldap(settings, monkeypatch, LDAP_SERVER_URI=ldap_uri,
              LDAP_USER_DN_TEMPLATE=f"uid=%(user)s,ou=people,{BASE}",
              LDAP_GROUP_SEARCH_BASE=f"ou=groups,{BASE}",
              LDAP_GROUP_FILTER="(objectClass=groupOfNames)",
              LDAP_REQUIRE_GROUP=f"cn=portal-users,ou=groups,{BASE}")


@pytest.fixture
def search_by_mail(ldap_uri, settings, monkeypatch, db):
    """Sign in with an e-mail address found by a service account; Slurm name from ``uid``."""
    monkeypatch.delenv("LDAP_USER_DN_TEMPLATE", raising=False)
    _use_ldap(settings, monkeypatch, LDAP_SERVER_URI=ldap_uri,
              LDAP_BIND_DN=f"cn=admin,{BASE}", LDAP_BIND_PASSWORD="adminpw",
              LDAP_USER_SEARCH_BASE=f"ou=people,{BASE}", LDAP_USER_FILTER="(mail=%(user)s)",
              LDAP_GROUP_SEARCH_BASE=f"ou=groups,{BASE}",
              LDAP_REQUIRE_GROUP=f"cn=portal-users,ou=groups,{BASE}")


def _sign_in(username: str, password: str = "secret") -> Client:
    client = Client()
    response = client.post(reverse("login"), {"username": username, "password": password})
    client.status = response.status_code  # type: ignore[attr-defined]
    return client


def _roles(user: User) -> dict[str, str]:
    return dict(Membership.objects.filter(user=user).values_list("team__slug", "role"))


def test_a_directory_lead_signs_in_as_admin_and_lead(direct_bind):
    assert _sign_in("alice").status == 302
    alice = User.objects.get(username="alice")
    assert (alice.is_staff, alice.email, alice.first_name) == (True, "alice@example.org", "Alice")
    assert _roles(alice) == {"nlp": "lead"}
    assert AuditEvent.objects.get(action="login").details == {"backend": "BeaconLDAPBackend"}


def test_a_directory_member_signs_in_as_a_plain_member(direct_bind):
    assert _sign_in("bob").status == 302
    bob = User.objects.get(username="bob")
    assert bob.is_staff is False
    assert _roles(bob) == {"nlp": "member"}
    assert Team.objects.get(slug="nlp").name == "nlp"  # created on first use


@pytest.mark.parametrize(("username", "password"), [
    ("bob", "wrong"), ("nobody", "secret"),
    ("carol", "secret"),  # right password, but outside portal-users
    ("*", "secret"), ("bob)(uid=*", "secret"),  # filter and DN injection stay literal
])
def test_refused_sign_ins_create_no_user(direct_bind, username, password):
    assert _sign_in(username, password).status == 200  # the form again, with an error
    assert not User.objects.exists()
    assert AuditEvent.objects.filter(action="login_failed", username=username).count() == 1


def test_leaving_a_group_removes_the_membership_it_gave(direct_bind, ldap_uri):
    _sign_in("bob")
    bob = User.objects.get(username="bob")
    other = Team.objects.create(slug="hand-made", name="Managed by hand")
    Membership.objects.create(user=bob, team=other)
    _ldap_modify(ldap_uri, f"cn=nlp-users,ou=groups,{BASE}",
                 f"delete: member\nmember: uid=bob,ou=people,{BASE}")
    try:
        _sign_in("bob")
        assert _roles(bob) == {"hand-made": "member"}  # nlp gone, the manual team kept
    finally:
        _ldap_modify(ldap_uri, f"cn=nlp-users,ou=groups,{BASE}",
                     f"add: member\nmember: uid=bob,ou=people,{BASE}")


def _ldap_modify(uri: str, dn: str, change: str) -> None:
    ldif = f"dn: {dn}\nchangetype: modify\n{change}\n"
    subprocess.run(["ldapmodify", "-x", "-H", uri, "-D", f"cn=admin,{BASE}", "-w", "adminpw"],
                   input=ldif, text=True, check=True, capture_output=True)


def test_the_slurm_name_comes_from_the_uid_attribute(search_by_mail, world):
    old = make_job(world.cluster, 901, None, None, user_name="dora")
    assert _sign_in("dora@example.org").status == 302
    dora = User.objects.get(username="dora@example.org")
    assert Profile.objects.get(user=dora).slurm_username == "dora"
    assert Job.objects.get(pk=old.pk).user == dora
    assert set(Job.objects.visible_to(dora).values_list("job_id", flat=True)) == {901}


def test_a_down_directory_fails_fast_and_closed(settings, monkeypatch, db):
    _use_ldap(settings, monkeypatch, LDAP_SERVER_URI=f"ldap://127.0.0.1:{_free_port()}",
              LDAP_USER_DN_TEMPLATE=f"uid=%(user)s,ou=people,{BASE}", LDAP_TIMEOUT="2")
    assert _sign_in("alice").status == 200
    assert not User.objects.exists()
