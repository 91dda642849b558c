"""``detect --scripts DIR`` takes job scripts saved exactly as ``sacct --batch-script``
prints them (tests/fixtures/slurm: recorded on the dev cluster), as the ``cli`` backend
does: the header goes, line numbers stay the script's, ``NONE`` is no script."""

from __future__ import annotations

import io
import random
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command

from apps.security.models import Finding, ScriptScan
from apps.security.saved_scripts import read_folder
from tests.analysis.security_builders import hf_token
from tests.conftest import make_job

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
MULTI = FIXTURES / "sacct_batch_script.txt"      # sacct --batch-script -j 5,19,21,4_0...
ENVS = FIXTURES / "sacct_env_vars.txt"
SINGLE = FIXTURES / "sacct_batch_script_one.txt"  # sacct --batch-script -j ID > ID.sh
SUBMITTED = FIXTURES / "batch_script_one.sbatch"  # the script that job was submitted with
START = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)


def test_a_multi_job_sacct_file_is_read_per_job(tmp_path):
    shutil.copy(MULTI, tmp_path / "batch.txt")
    shutil.copy(ENVS, tmp_path / "env.txt")
    saved = read_folder(tmp_path)
    [(source, text)] = saved.texts(21, "21")[:1]
    assert source == "batch script" and text.startswith("#!/bin/bash\n#SBATCH --nodes=2")
    assert "Batch Script for" not in text and "-----" not in text
    assert [s for s, _ in saved.texts(21, "21")] == ["batch script", "environment"]
    assert saved.texts(20, "19+1")[0][1] == "#!/bin/sh\nexit 0\n"
    assert saved.texts(22, "22") == []          # NONE in the environments, no script
    assert saved.texts(999, "999") == []


def test_a_per_job_file_saved_as_sacct_prints_it_keeps_the_scripts_line_numbers(tmp_path):
    recorded = SINGLE.read_text()
    job = recorded.splitlines()[0].removeprefix("Batch Script for ")
    (tmp_path / f"{job}.sh").write_text(recorded)
    [(source, text)] = read_folder(tmp_path).texts(int(job), job)
    assert source == "batch script" and text == SUBMITTED.read_text()


def test_a_per_job_file_holding_another_jobs_script_is_said(tmp_path):
    shutil.copy(MULTI, tmp_path / "21.sh")
    saved = read_folder(tmp_path)
    assert saved.texts(21, "21")[0][1].startswith("#!/bin/bash\n#SBATCH --nodes=2")
    assert "21.sh also holds the batch script of job(s) 19+0, 19+1, 4_0, 5" in saved.problems[0]


@pytest.mark.django_db
def test_detect_finds_a_secret_in_a_saved_sacct_file_on_the_scripts_line(world, tmp_path):
    """The recorded file with a runtime token in place of its placeholder line: the
    framing is what sacct printed; the finding's line is the script's."""
    recorded = SINGLE.read_text()
    job = recorded.splitlines()[0].removeprefix("Batch Script for ")
    token = hf_token(random.Random(7))
    (tmp_path / f"{job}.sh").write_text(recorded.replace("PLACEHOLDER_TOKEN", token))
    script_line = SUBMITTED.read_text().splitlines().index("export HF_TOKEN=PLACEHOLDER_TOKEN")
    make_job(world.cluster, int(job), world.users["bob"], world.team_a,
             submit_time=START + timedelta(minutes=5))
    out = io.StringIO()
    call_command("detect", "--cluster", world.cluster.name, "--since", START.isoformat(),
                 "--until", (START + timedelta(minutes=30)).isoformat(), "--scripts",
                 str(tmp_path), stdout=out, stderr=io.StringIO())
    [finding] = Finding.objects.filter(rule_key="secret_in_job_script")
    assert finding.evidence["where"].startswith(f"batch script, line {script_line + 1},")
    assert token not in str(finding.evidence) and token not in out.getvalue()
    # the world's other jobs of the week have no saved script
    assert "(1 of 5 jobs had a script or environment)" in out.getvalue()
    assert ScriptScan.objects.get(job__job_id=int(job)).had_script


@pytest.mark.django_db
def test_a_scripts_folder_that_cannot_be_read_is_a_failed_source(world, tmp_path):
    from django.core.management.base import CommandError

    make_job(world.cluster, 160, world.users["bob"], world.team_a,
             submit_time=START + timedelta(minutes=5))
    with pytest.raises(CommandError, match="failed"):
        call_command("detect", "--cluster", world.cluster.name, "--since", START.isoformat(),
                     "--until", (START + timedelta(minutes=30)).isoformat(), "--scripts",
                     str(tmp_path / "missing"), stdout=io.StringIO(), stderr=io.StringIO())
    assert not ScriptScan.objects.exists()  # scanned again once the folder is back
