"""Rules, allow-lists and advisories are data: seeded, validated, edited in the admin."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from apps.analysis.security_rules import RULES
from apps.security.defaults import seed
from apps.security.models import Advisory, AllowListEntry, SecurityRule

pytestmark = pytest.mark.django_db


def test_the_defaults_are_seeded_once_and_edits_survive_a_reseed():
    from django.apps import apps

    assert set(SecurityRule.objects.values_list("key", flat=True)) == set(RULES)
    assert Advisory.objects.filter(software="slurm").exists()
    rule = SecurityRule.objects.get(key="miner_in_job")
    rule.params = {"egress_ratio": 2.5}
    rule.save()
    assert seed(apps) == {"rules": 0, "advisories": 0, "allow": 0}
    assert SecurityRule.objects.get(key="miner_in_job").as_config().params["egress_ratio"] == 2.5


@pytest.mark.parametrize("params", [{"egress_ratio": -1}, {"nonsense": 1}, ["a list"]])
def test_bad_thresholds_are_refused_with_the_field_named(params):
    rule = SecurityRule.objects.get(key="miner_in_job")
    rule.params = params
    with pytest.raises(ValidationError) as caught:
        rule.full_clean()
    assert "params" in caught.value.message_dict


@pytest.mark.parametrize(("kind", "value"), [("version", "munge"), ("version", "munge="),
                                             ("admin_user", " ")])
def test_bad_allow_list_entries_are_refused(kind, value):
    with pytest.raises(ValidationError):
        AllowListEntry(kind=kind, value=value, reason="x").full_clean()


def test_advisories_need_readable_versions():
    with pytest.raises(ValidationError, match="not versions"):
        Advisory(software="x", fixed_versions="main-abc", cves="CVE-1").full_clean()
    good = Advisory(software="x", fixed_versions="1.2.3, 2.0.1", cves="CVE-1, CVE-2")
    good.full_clean()
    assert good.as_record().fixed == ("1.2.3", "2.0.1") and good.as_record().cves == \
        ("CVE-1", "CVE-2")


def test_admins_edit_rules_and_the_admin_pages_render(login, world):
    world.users["staff"].is_superuser = True
    world.users["staff"].save()
    client = login("staff")
    rule = SecurityRule.objects.get(key="gpu_activity_without_job")
    url = reverse("admin:security_securityrule_change", args=[rule.pk])
    page = client.get(url)
    assert page.status_code == 200 and "util_min" in page.content.decode()
    form = {"title": rule.title, "enabled": "on", "severity": "critical",
            "params": '{"min_minutes": 20}', "notes": "burn-in takes 15 minutes here"}
    assert client.post(url, form).status_code == 302
    rule.refresh_from_db()
    assert rule.severity == "critical" and rule.as_config().params["min_minutes"] == 20
    refused = client.post(url, {**form, "params": '{"min_minutes": -5}'})
    assert refused.status_code == 200 and "min_minutes: expected a number" in \
        refused.content.decode()
    for name in ("securityrule", "allowlistentry", "advisory", "finding", "sshlogevent",
                 "nodeinventory", "serviceprobe"):
        assert client.get(reverse(f"admin:security_{name}_changelist")).status_code == 200
