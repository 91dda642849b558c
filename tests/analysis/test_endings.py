"""Endings in words: every kind of ending Slurm records, as a table; output paths; memory."""

from __future__ import annotations

import pytest

from apps.analysis.endings import (
    EndingFacts,
    JobNames,
    ending_kind,
    exit_words,
    expand,
    explain,
    memory_words,
    output_paths,
    signal_words,
)

H = 3600.0

# (state, exit code, signal, started, kind, words the cause must contain, a check's words, owner)
ENDINGS = [
    ("COMPLETED", 0, 0, True, "completed", "exited with code 0", None, "nobody"),
    ("FAILED", 1, 0, True, "exit", "code 1, a general error", "traceback", "researcher"),
    ("FAILED", 2, 0, True, "exit", "usage error", "arguments", "researcher"),
    ("FAILED", 127, 0, True, "exit", "command not found", "module loads", "researcher"),
    ("FAILED", 126, 0, True, "exit", "could not run", "chmod +x", "researcher"),
    ("FAILED", 3, 0, True, "exit", "the program's own code", "exit codes", "researcher"),
    ("FAILED", 137, 0, True, "exit", "killed by SIGKILL (9)", "exit codes", "researcher"),
    ("FAILED", 139, 0, True, "exit", "SIGSEGV (11)", "exit codes", "researcher"),
    ("FAILED", 0, 11, True, "signal", "SIGSEGV (11): segmentation fault", "PYTHONFAULTHANDLER",
     "researcher"),
    ("FAILED", 0, 6, True, "signal", "SIGABRT (6)", "NCCL error", "researcher"),
    ("FAILED", 0, 7, True, "signal", "SIGBUS (7)", "/dev/shm", "researcher"),
    ("FAILED", 0, 9, True, "sigkill", "SIGKILL (9): killed outright", "KillWait",
     "researcher"),
    ("OUT_OF_MEMORY", 0, 125, True, "oom", "out-of-memory killer", "DataLoader workers",
     "researcher"),
    ("FAILED", 0, 125, True, "oom", "out-of-memory killer", "--mem", "researcher"),
    ("CANCELLED", 0, 15, True, "cancelled", "scancel), which sent SIGTERM (15)",
     "workflow tools", "nobody"),
    ("CANCELLED", 0, 9, True, "sigkill", "SIGKILL", "ignores SIGTERM", "researcher"),
    ("CANCELLED", 0, 0, False, "cancelled_pending", "while it waited in the queue",
     "dependencies", "nobody"),
    ("TIMEOUT", 0, 0, True, "timeout", "after 2:00:00 of its 2:00:00 limit",
     "--signal=B:USR1@300", "researcher"),
    ("NODE_FAIL", 0, 0, True, "node_fail", "not the job's doing", "--requeue", "hardware"),
    ("PREEMPTED", 0, 0, True, "preempted", "higher-priority", "not preemptible", "platform"),
    ("BOOT_FAIL", 0, 0, True, "boot_fail", "failed to boot", "sinfo -R", "hardware"),
    ("DEADLINE", 0, 0, True, "deadline", "--deadline", "--deadline", "researcher"),
    ("SPECIAL_EXIT", 0, 0, True, "unknown", "SPECIAL_EXIT", None, "platform"),
]


@pytest.mark.parametrize(("state", "code", "signal", "started", "kind", "cause", "check",
                          "owner"), ENDINGS)
def test_every_ending_is_explained_with_what_to_check(state, code, signal, started, kind,
                                                      cause, check, owner):
    ending = explain(EndingFacts(state, code, signal, started, run_s=2 * H,
                                 time_limit_s=2 * H))
    assert ending is not None and ending.kind == kind and ending.owner == owner
    assert cause in ending.cause, ending.cause
    assert ending.status == f"{code}:{signal}"
    if check is None:
        assert ending.checks == ()
    else:
        assert any(check in c for c in ending.checks), ending.checks


@pytest.mark.parametrize("state", ["PENDING", "RUNNING", "COMPLETING", "REQUEUED", "SUSPENDED"])
def test_a_job_that_has_not_ended_has_no_ending(state):
    assert ending_kind(EndingFacts(state)) is None and explain(EndingFacts(state)) is None


@pytest.mark.parametrize(("code", "words"), [
    (0, "success"), (1, "uncaught exception"), (130, "SIGINT (2)"), (143, "SIGTERM (15)"),
    (134, "SIGABRT (6)"), (255, "out of range"), (42, "the program's own code"),
])
def test_exit_codes_in_words(code, words):
    assert words in exit_words(code)


def test_unknown_signals_are_named_as_numbers():
    assert signal_words(31) == "signal 31 (31): no common meaning"


# --- Memory ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("peak", "requested", "oom", "words"), [
    (61_440.0, 65_536.0, True, "Peak 60G of 64G requested per node (94%"),
    (20_000.0, 65_536.0, True, "a fast spike to the limit is missed"),
    (20_000.0, 65_536.0, False, "(31%, Slurm's MaxRSS"),
    (None, 65_536.0, True, "Slurm recorded no peak (MaxRSS)"),
    (900.0, None, False, "Peak 0.9G (MaxRSS); no memory request"),
    (None, None, False, ""),
])
def test_memory_peak_against_request(peak, requested, oom, words):
    text = memory_words(peak, requested, oom)
    assert words in text if words else text == ""
    if not oom or (peak and requested and peak / requested >= 0.9):
        assert "missed" not in text


def test_an_oom_ending_suggests_a_request_above_the_peak():
    ending = explain(EndingFacts("OUT_OF_MEMORY", 0, 125, mem_requested_mb=65_536.0,
                                 mem_peak_mb=65_000.0))
    assert ending is not None and "--mem=96G per node" in ending.checks[0]
    assert "Peak 63G of 64G" in ending.memory


# --- Output paths ---------------------------------------------------------------------------

JOB = JobNames(job_id=4242, user="bob", name="train", first_node="gpu01",
               work_dir="/home/bob/train")
TASK = JobNames(job_id=4250, user="bob", name="sweep", array_job_id=4242, array_task_id=7,
                work_dir="/home/bob")


@pytest.mark.parametrize(("pattern", "job", "path"), [
    ("%x-%j.out", JOB, "/home/bob/train/train-4242.out"),
    ("/scratch/%u/%j.log", JOB, "/scratch/bob/4242.log"),
    ("logs/%A_%a.out", TASK, "/home/bob/logs/4242_7.out"),
    ("%j-%5a.out", TASK, "/home/bob/4250-00007.out"),
    ("100%%-%N.out", JOB, "/home/bob/train/100%-gpu01.out"),
    ("%A.out", JOB, "/home/bob/train/4242.out"),  # not an array: %A is the job id
])
def test_slurm_filename_patterns_expand(pattern, job, path):
    assert expand(pattern, job) == path


def test_the_scripts_lines_give_the_paths_and_stderr_follows_stdout():
    paths = output_paths(JOB, True, "%x-%j.out")
    assert (paths.stdout, paths.stderr) == ("/home/bob/train/train-4242.out",) * 2
    assert "#SBATCH lines" in paths.source
    paths = output_paths(JOB, True, "%x-%j.out", "/tmp/%j.err")
    assert paths.stderr == "/tmp/4242.err"


def test_without_output_lines_slurms_default_applies_and_says_so():
    assert output_paths(JOB, True).stdout == "/home/bob/train/slurm-4242.out"
    paths = output_paths(TASK, True)
    assert paths.stdout == paths.stderr == "/home/bob/slurm-4242_7.out"
    assert "Slurm's default" in paths.source


def test_without_a_stored_script_the_paths_are_unknown_and_it_says_why():
    paths = output_paths(JOB, False)
    assert not paths.known and paths.stdout == paths.stderr == ""
    assert "no batch script is stored" in paths.source
