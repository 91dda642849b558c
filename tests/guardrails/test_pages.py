"""My alerts and the preferences page: each user sees their own, leads their teams'."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from apps.guardrails.models import Alert, AlertPreference, TeamAlertSetting
from tests.guardrails.conftest import START


def _alert(job, kind="gpus_idle"):
    return Alert.objects.create(job=job, kind=kind, gpus=["gpu01:1"], since=START,
                                raised_at=START, text=f"seen on {job.display_id}",
                                status=Alert.Status.SENT)


def test_my_alerts_lists_only_my_jobs_alerts(world, login):
    _alert(world.jobs["bob"])
    _alert(world.jobs["carol"])
    bob = login("bob").get("/guardrails/").content.decode()
    assert "seen on 101" in bob and "seen on 201" not in bob
    carol = login("carol").get("/guardrails/").content.decode()
    assert "seen on 201" in carol and "seen on 101" not in carol


def test_a_lead_switches_to_the_teams_alerts_and_a_member_cannot(world, login):
    _alert(world.jobs["bob"])
    _alert(world.jobs["carol"])
    alice = login("alice").get("/guardrails/?scope=team").content.decode()
    assert "seen on 101" in alice and "seen on 201" not in alice
    tom = login("tom").get("/guardrails/?scope=team").content.decode()
    assert "seen on 101" not in tom


def test_a_user_turns_alerts_off_and_picks_kinds(world, login):
    answer = login("bob").post("/guardrails/preferences/", {
        "form": "me", "me-alerts_choice": "off", "me-kinds_off": ["straggler"],
        "me-webhook_url": "", "me-webhook_format": "slack", "me-digest": "on"})
    assert answer.status_code == 303
    pref = AlertPreference.objects.get(user=world.users["bob"])
    assert pref.alerts is False and pref.kinds_off == ["straggler"] and pref.digest


def test_a_lead_sets_the_team_default_and_a_member_cannot(world, login):
    form = f"team-{world.team_a.pk}"
    data = {"form": form, f"{form}-webhook_url": "https://chat.example/hook",
            f"{form}-webhook_format": "mattermost", f"{form}-lead_digest": "on"}
    assert login("bob").post("/guardrails/preferences/", data).status_code == 403
    assert login("alice").post("/guardrails/preferences/", data).status_code == 303
    setting = TeamAlertSetting.objects.get(team=world.team_a)
    assert setting.alerts_default is False and setting.webhook_format == "mattermost"


def test_the_commands_run_the_services(world):
    out = io.StringIO()
    call_command("check_guardrails", stdout=out)  # the world's cluster has no Prometheus
    assert json.loads(out.getvalue())["jobs"] == 0
    with pytest.raises(CommandError, match="has no Prometheus"):
        call_command("check_guardrails", "--cluster", world.cluster.name)
    out = io.StringIO()
    call_command("send_digests", "--now", "2026-11-10T08:00:00Z", stdout=out)
    assert json.loads(out.getvalue())["week"] == "2026-11-02"
    with pytest.raises(CommandError, match="time zone"):
        call_command("send_digests", "--now", "2026-11-10T08:00:00")
