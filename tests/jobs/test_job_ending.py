"""The job page explains every ending: exit status in words, what to check, memory peak
against request, and where stdout/stderr went (or why that is unknown)."""

from __future__ import annotations

import html as htmllib

import pytest
from django.urls import reverse

from apps.jobs.models import Job


def _page(login, job: Job, who: str = "bob") -> str:
    response = login(who).get(reverse("jobs-detail", args=[job.cluster.name, job.job_id]))
    assert response.status_code == 200
    return htmllib.unescape(response.content.decode())


def _card(page: str) -> str:
    return page.split('id="ending"')[1].split("</section>")[0]


def _set(job: Job, **fields) -> Job:
    for name, value in fields.items():
        setattr(job, name, value)
    job.save()
    return job


@pytest.mark.parametrize(("fields", "title", "words", "check"), [
    ({"state": "FAILED", "exit_code": 2}, "Failed: the script exited with an error",
     "exited with code 2, a usage error", "Check the arguments the script passes"),
    ({"state": "FAILED", "exit_code": 127}, "Failed: the script exited with an error",
     "command not found", "module loads"),
    ({"state": "OUT_OF_MEMORY", "exit_code": 0, "exit_signal": 125},
     "Killed by the out-of-memory killer", "out-of-memory killer", "DataLoader workers"),
    ({"state": "TIMEOUT"}, "Stopped at its time limit", "after 1:00:00 of its 2:00:00 limit",
     "--signal=B:USR1@300"),
    ({"state": "NODE_FAIL"}, "A node failed under the job", "not the job's doing",
     "sinfo -R"),
    ({"state": "PREEMPTED"}, "Preempted by a higher-priority job", "higher-priority",
     "--requeue"),
    ({"state": "CANCELLED", "exit_signal": 15}, "Cancelled", "SIGTERM (15)", "workflow tools"),
    ({"state": "FAILED", "exit_code": 0, "exit_signal": 9}, "Killed (SIGKILL)",
     "SIGKILL (9)", "KillWait"),
])
def test_each_ending_has_its_words_and_what_to_check(world, login, fields, title, words,
                                                     check):
    job = _set(world.jobs["bob"], **fields)
    page = _page(login, job)
    card = _card(page)
    assert f"How it ended: {title}" in card and words in card and check in card
    assert "What to check" in card and f"Ending</a>: {title}" in page
    # no metrics: the diagnosis card points at the ending, not at "nothing to report"
    assert "How the job ended, and what to check for that" in page


def test_a_completed_job_says_so_without_a_checklist(world, login):
    card = _card(_page(login, world.jobs["bob"]))
    assert "How it ended: Completed normally" in card and "What to check" not in card


def test_an_oom_job_shows_its_memory_peak_against_the_request(world, login):
    job = _set(world.jobs["bob"], state="OUT_OF_MEMORY", exit_signal=125,
               memory_mb=65_536, mem_peak_mb=63_800.0)
    card = _card(_page(login, job))
    assert "Peak 62G of 64G requested per node (97%" in card
    assert "--mem=96G per node" in card


def test_without_a_measured_peak_the_page_says_slurm_recorded_none(world, login):
    job = _set(world.jobs["bob"], state="OUT_OF_MEMORY", exit_signal=125)
    assert "Slurm recorded no peak (MaxRSS)" in _card(_page(login, job))


def test_output_paths_come_from_the_job_script_or_slurms_default(world, login):
    job = _set(world.jobs["bob"], work_dir="/home/bob/run", name="train",
               labels={"rules": 2, "stdout": "%x-%j.out"})
    card = _card(_page(login, job))
    assert f"<code>/home/bob/run/train-{job.job_id}.out</code>" in card
    assert "(with stdout)" in card and "#SBATCH lines" in card
    _set(job, labels={"rules": 2, "stdout": ""})
    card = _card(_page(login, job))
    assert f"/home/bob/run/slurm-{job.job_id}.out" in card and "Slurm's default" in card


def test_without_a_stored_script_the_page_says_where_the_paths_are_not_known(world, login):
    card = _card(_page(login, _set(world.jobs["bob"], labels={})))
    assert "stdout / stderr" in card and "Unknown: no batch script is stored" in card


def test_a_running_job_has_no_ending_but_its_output_paths(world, login):
    job = _set(world.jobs["bob"], state="RUNNING", end_time=None, exit_code=None,
               exit_signal=None, labels={"rules": 2, "stdout": "/scratch/%u/%j.log"})
    page = _page(login, job)
    card = _card(page)
    assert "How it ended" not in card and "<h2>Output</h2>" in card
    assert f"/scratch/bob/{job.job_id}.log" in card and "Ending</a>:" not in page
