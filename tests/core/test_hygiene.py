"""Hygiene (issue 27 item 4): no caching of signed-in responses, a private data folder and
database, no server paths in trace messages, bidirectional controls shown as markers, long
outside text cut with a way to see the rest."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from apps.accounts import tokens
from apps.core.checks import check_data_dir
from apps.core.middleware import neutralise_bidi
from apps.core.sqlite import make_private
from apps.core.templatetags.portal import LONG_TEXT_MAX, long_text
from apps.jobs.models import Job, TraceRun
from apps.jobs.traces import import_trace
from tests.api.test_hostile_input import traced_job  # noqa: F401  fixture
from tests.jobs.test_job_page_detail import _trace_files
from tests.trace_builder import Step, simulate, to_chrome

ROOT = Path(__file__).resolve().parents[2]


def _job_page(job: Job) -> str:
    return reverse("jobs-detail", args=[job.cluster.name, job.job_id])


# --- Cache-Control --------------------------------------------------------------------------


def _private(response) -> bool:
    directives = {d.strip() for d in response.get("Cache-Control", "").split(",")}
    return {"private", "no-store"} <= directives


@pytest.mark.parametrize("url", ["/", "/jobs/", "/api/v1/jobs/", "/account/tokens/"])
def test_signed_in_responses_are_private_and_not_stored(world, login, url):
    response = login("bob").get(url)
    assert response.status_code == 200 and _private(response)


def test_api_token_answers_are_private_too(world):
    _, key = tokens.create(world.users["bob"], "hygiene test")
    response = Client().get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {key}")
    assert response.status_code == 200 and _private(response)


def test_the_same_page_signed_out_is_left_alone(world, login):
    assert not _private(Client().get("/api/v1/"))  # the API's front door needs no sign-in
    assert _private(login("bob").get("/api/v1/"))


# --- The data folder and the SQLite file ------------------------------------------------


def test_a_fresh_data_folder_and_database_are_private(tmp_path):
    data = tmp_path / "fresh" / "data"
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE")}
    env["BEACON_DATA_DIR"] = str(data)
    code = ("from django.db import connection\n"
            "with connection.cursor() as c: c.execute('CREATE TABLE t (x)')\n")
    out = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    files = [p for p in data.iterdir() if p.name.startswith("beacon.sqlite3")]
    assert files and {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o600}
    assert stat.S_IMODE((data / "secret_key").stat().st_mode) == 0o600


def test_an_existing_database_readable_by_others_is_tightened(tmp_path):
    db = tmp_path / "old.sqlite3"
    db.write_bytes(b"")
    db.chmod(0o644)
    make_private(db)
    assert stat.S_IMODE(db.stat().st_mode) == 0o600


def test_a_data_folder_others_can_read_is_named_by_a_check(tmp_path, settings):
    settings.DATA_DIR = tmp_path
    tmp_path.chmod(0o755)
    [warning] = check_data_dir()
    assert warning.id == "core.W006" and f"chmod 700 {tmp_path}" in warning.hint
    tmp_path.chmod(0o700)
    assert check_data_dir() == []


# --- No server paths in what users read -----------------------------------------------------


def test_upload_warnings_name_the_uploaders_files_not_server_paths(traced_job, login):  # noqa: F811
    bad = SimpleUploadedFile("rank9.json", b'{"traceEvents": [')
    response = login("bob").post(reverse("api:job-traces", args=[traced_job.pk]),
                                 {"files": [*_trace_files(), bad]})
    assert response.status_code == 201, response.content
    run = TraceRun.objects.get(job=traced_job)
    text = json.dumps([run.warnings, run.files, response.json()])
    assert "rank9.json is not valid JSON" in text
    assert "beacon-trace-" not in text and "/tmp" not in text and "00003-" not in text
    page = login("bob").get(_job_page(traced_job)).content.decode()
    assert "rank9.json" in page and "beacon-trace-" not in page


def test_imported_warnings_name_files_not_the_folders_they_were_in(traced_job, tmp_path):  # noqa: F811
    folder = tmp_path / "secret-site-path"
    folder.mkdir()
    [trace] = simulate([[Step()] * 4])
    (folder / "rank0.json").write_text(json.dumps(to_chrome(trace)))
    (folder / "rank1.json").write_text("not json")
    run = import_trace(traced_job, [folder])
    assert run.warnings and "rank1.json" in json.dumps(run.warnings)
    assert str(tmp_path) not in json.dumps([run.warnings, run.files])


# --- Bidirectional control characters -------------------------------------------------------

BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"


def test_every_bidi_control_becomes_a_visible_marker():
    shown = neutralise_bidi(f"a{BIDI}b — é".encode()).decode()
    assert shown == ("a[U+202A][U+202B][U+202C][U+202D][U+202E][U+2066][U+2067][U+2068]"
                     "[U+2069][U+200E][U+200F]b — é")


def test_slurm_names_with_an_override_are_shown_with_markers(world, login):
    job = world.jobs["bob"]
    Job.objects.filter(pk=job.pk).update(name="report\u202egpj.exe", comment="\u2067x",
                                         user_name="bob\u200f")
    client = login("bob")
    for url in (_job_page(job), reverse("jobs-list")):
        html = client.get(url).content.decode()
        assert not any(c in html for c in BIDI)
        assert "report[U+202E]gpj.exe" in html
    api = client.get(reverse("api:job-detail", args=[job.pk])).json()
    assert api["name"] == "report\u202egpj.exe"  # data stays data outside HTML


# --- Long outside text --------------------------------------------------------------------


def test_a_200000_character_comment_is_cut_with_a_way_to_see_more(world, login):
    job = world.jobs["bob"]
    Job.objects.filter(pk=job.pk).update(comment="c" * 200_000, work_dir="/w/" + "d" * 5000)
    response = login("bob").get(_job_page(job))
    html = response.content.decode()
    assert len(html) < 100_000  # the page held all 200,000 before
    assert "show all 200,000 characters" in html
    assert f"{200_000 - LONG_TEXT_MAX:,} more characters not shown here" in html
    assert "show all 5,003 characters" in html and "d" * 4000 in html  # all of it, opened


@pytest.mark.parametrize(("text", "shown", "words"), [
    ("short", 10, None), ("x" * 11, 10, "show all 11 characters"),
    ("<b>" * 5, 10, "show all 15 characters"),
])
def test_long_text_escapes_and_cuts(text, shown, words):
    html = str(long_text(text, shown))
    assert "<b>" not in html and ("<details" in html) == (words is not None)
    assert words is None or words in html
