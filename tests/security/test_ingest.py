"""Ingest paths: sshd lines, inventories and probe results, from files and the API.
Hostile input is counted and skipped; nothing crashes; re-posting is harmless."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.urls import reverse

from apps.security.ingest import ingest_inventory, ingest_probes, ingest_sshd
from apps.security.models import NodeInventory, ServiceProbe, SshLogEvent

pytestmark = pytest.mark.django_db
LINES = [
    "Nov  2 12:10:00 gpu01 sshd[7]: Accepted publickey for carol from 10.1.1.1 port 4 ssh2",
    "Nov  2 12:11:00 gpu01 sshd[8]: pam_slurm_adopt: Access denied by pam_slurm_adopt: you "
    "have no active jobs on this node",
    "Nov  2 12:11:00 gpu01 sshd[9]: Connection closed by authenticating user eve 10.9.9.9 "
    "port 5 [preauth]",
    "Nov  2 12:12:00 gpu01 CRON[1]: (root) CMD (true)",
    "Nov  2 12:13:00 gpu01 sshd[10]: Accepted publickey for " + "a" * 5000,
    "",
    "\x00\x01\x02",
]


def post(client, name, body):
    return client.post(reverse(f"api:security-ingest-{name}"), body,
                       content_type="application/json")


def test_sshd_lines_are_stored_once_and_bad_lines_counted(world):
    result = ingest_sshd(world.cluster, LINES)
    assert (result.read, result.stored, result.duplicates) == (7, 3, 0)
    assert result.skipped == 1 and "over 4096" in result.problems[0]
    again = ingest_sshd(world.cluster, [*LINES, LINES[0]])
    assert (again.stored, again.duplicates) == (0, 4)
    assert SshLogEvent.objects.count() == 3


def test_the_api_takes_lines_from_collectors_with_an_admin_token(world, login):
    body = {"cluster": "testcluster", "lines": LINES, "reference": "2026-11-03T00:00:00Z"}
    answer = post(login("staff"), "sshd", body)
    assert answer.status_code == 201 and answer.json()["stored"] == 3
    assert post(login("alice"), "sshd", body).status_code == 403
    assert post(login("staff"), "sshd", {**body, "cluster": "nope"}).status_code == 404
    assert post(login("staff"), "sshd", {**body, "lines": []}).status_code == 400
    assert post(login("staff"), "sshd", {**body, "lines": "one line"}).status_code == 400
    refused = post(login("staff"), "sshd", {**body, "lines": ["ok", 12, None]})
    assert refused.status_code == 400 and refused.json()["lines"] == [
        "item 1: a line must be a string", "item 2: This field may not be null."]
    huge = post(login("staff"), "sshd", {**body, "lines": ["0" * 16000] * 300})
    assert huge.status_code == 400 and "too large" in huge.json()["detail"]


def test_inventories_keep_the_newest_and_skip_odd_entries(world, login):
    docs = [{"node": "gpu01", "collected_at": 1790000000,
             "software": {"slurm": "22.05.8", "munge": "main-d5e5f51", "bad key!": "1",
                          "nested": {"x": 1}, "flag": True}},
            {"node": "../../etc", "collected_at": 1790000000, "software": {}},
            {"node": "gpu02"}, "not an object"]
    result = ingest_inventory(world.cluster, docs)
    assert (result.read, result.stored) == (4, 1) and result.skipped == 6
    row = NodeInventory.objects.get()
    assert row.software == {"slurm": "22.05.8", "munge": "main-d5e5f51"}
    older = ingest_inventory(world.cluster, [{**docs[0], "collected_at": 1780000000,
                                              "software": {"slurm": "20.11.1"}}])
    assert older.duplicates == 1 and NodeInventory.objects.get().software["slurm"] == "22.05.8"
    answer = post(login("staff"), "inventory", {"cluster": "testcluster", "inventories": [
        {**docs[0], "collected_at": "2026-11-30T00:00:00Z", "software": {"slurm": "23.11.1"}}]})
    assert answer.status_code == 201 and NodeInventory.objects.get().software["slurm"] == \
        "23.11.1"


def test_probe_results_are_validated_and_stored_once(world, login):
    doc = {"collected_at": 1795996800, "probes": [
        {"node": "gpu01", "port": 8265, "service": "ray-dashboard", "status": 200,
         "auth_required": False, "job_id": 101, "user": "bob", "observed_at": 1795995551},
        {"node": "gpu01", "port": 8888, "status": 403, "auth_required": True},
        {"node": "gpu01", "port": 99999}, {"port": 1}, 17]}
    result = ingest_probes(world.cluster, doc)
    assert (result.read, result.stored, result.skipped) == (5, 2, 3)
    assert ingest_probes(world.cluster, doc).duplicates == 2
    first = ServiceProbe.objects.get(port=8265)
    assert (first.status, first.auth_required, first.job_id_raw) == (200, False, 101)
    answer = post(login("staff"), "probes", {"cluster": "testcluster", **doc,
                                             "probes": doc["probes"][:4]})
    assert answer.status_code == 201 and answer.json()["duplicates"] == 2
    refused = post(login("staff"), "probes", {"cluster": "testcluster", **doc})
    assert refused.status_code == 400 and refused.json() == {
        "probes": ["item 4: Expected a dictionary of items but got type \"int\"."]}


def test_the_ingest_command_reads_files_and_folders(world, tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "sshd-gpu01.log").write_text("\n".join(LINES) + "\n")
    (tmp_path / "inv").mkdir()
    (tmp_path / "inv" / "gpu01.json").write_text(json.dumps(
        {"node": "gpu01", "collected_at": 1790000000, "software": {"pytorch": "2.5.1"}}))
    (tmp_path / "inv" / "broken.json").write_text("{not json")
    out = io.StringIO()
    call_command("ingest_security", "--cluster", "testcluster", "--sshd-log",
                 str(tmp_path / "logs"), "--inventory", str(tmp_path / "inv"),
                 "--reference", "2026-11-03T00:00:00Z", stdout=out)
    text = out.getvalue()
    assert "sshd logs: read 7, stored 3" in text and "inventories: read 1, stored 1" in text
    assert "broken.json: not a JSON inventory" in text
