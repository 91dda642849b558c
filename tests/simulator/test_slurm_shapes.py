"""The Slurm JSON has the keys and types of real 22.05.8 output at every level.

``tests/fixtures/slurm/`` holds outputs recorded on the real dev cluster
(``deploy/dev/slurm.sh``); the comparison merges the shapes of all records on each side.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def shape(value: Any) -> Any:
    if isinstance(value, dict):
        if value and all(k.isdigit() for k in value):  # maps keyed by index (sockets, cores)
            return {"<n>": _merge_all([shape(v) for v in value.values()])}
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_merge_all([shape(v) for v in value])] if value else []
    return {int: "number", float: "number", bool: "bool", str: "str"}.get(type(value), "null")


def _merge_all(items: list[Any]) -> Any:
    out = items[0]
    for item in items[1:]:
        out = _merge(out, item)
    return out


def _merge(a: Any, b: Any) -> Any:
    if isinstance(a, dict) and isinstance(b, dict):
        return {**a, **b, **{k: _merge(a[k], b[k]) for k in a.keys() & b.keys()}}
    if isinstance(a, list) and isinstance(b, list):
        return [_merge(a[0], b[0])] if a and b else a or b
    if "null" in (a, b) or a == b:
        return b if a == "null" else a
    return "|".join(sorted(set(f"{a}|{b}".split("|"))))


def differences(real: Any, sim: Any, path: str = "") -> list[str]:
    if isinstance(real, dict) and isinstance(sim, dict):
        out = [f"missing {path}/{k}" for k in real if k not in sim]
        out += [f"extra {path}/{k}" for k in sim if k not in real]
        return out + [d for k in real.keys() & sim.keys()
                      for d in differences(real[k], sim[k], f"{path}/{k}")]
    if isinstance(real, list) and isinstance(sim, list):
        return differences(real[0], sim[0], path + "[]") if real and sim else []
    if "null" in (real, sim) or set(str(sim).split("|")) <= set(str(real).split("|")):
        return []
    return [f"type {path}: real {real}, simulated {sim}"]


@pytest.mark.parametrize(("fixture", "output"), [
    ("sacct_window.json", "slurm/sacct.json"),
    ("squeue.json", "slurm/squeue.json"),
    ("sinfo.json", "slurm/sinfo.json"),
])
def test_it_matches_the_recorded_slurm_shape(full_run, fixture, output):
    real = json.loads((FIXTURES / fixture).read_text())
    sim = json.loads((full_run / output).read_text())
    assert differences(shape(real), shape(sim)) == []


def test_the_shape_check_catches_a_renamed_key():
    real = shape({"jobs": [{"time": {"start": 1}}]})
    assert differences(real, shape({"jobs": [{"time": {"begin": 1}}]})) == [
        "missing /jobs[]/time/start", "extra /jobs[]/time/begin"]


def test_sacct_hides_exit_codes_as_22_05_does_and_the_text_keeps_them(full_run):
    jobs = {j["job_id"]: j for j in json.loads((full_run / "slurm/sacct.json").read_text())["jobs"]}
    text = dict(line.split("|") for line in
                (full_run / "slurm/sacct_exitcodes.txt").read_text().splitlines()[1:])
    failed = [i for i, j in jobs.items() if j["state"]["current"] == "FAILED"
              and text[str(i)] != "0:0"]
    assert failed
    for job_id in failed:
        assert jobs[job_id]["exit_code"] == {"status": "SUCCESS", "return_code": 0}
    oom = [j for j in jobs.values() if j["state"]["current"] == "OUT_OF_MEMORY"]
    assert all(j["exit_code"]["signal"]["signal_id"] == 125 for j in oom)


def test_sacct_covers_the_states_and_records_a_portal_needs(full_run):
    jobs = json.loads((full_run / "slurm/sacct.json").read_text())["jobs"]
    states = {j["state"]["current"] for j in jobs}
    assert {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "RUNNING",
            "NODE_FAIL"} <= states
    assert any(j["array"]["job_id"] and j["array"]["task_id"] is not None for j in jobs)
    assert any(len(j["steps"]) > 1 and j["allocation_nodes"] > 1 for j in jobs)
    typed = [t for j in jobs for t in j["tres"]["allocated"] if t["name"] and ":" in t["name"]]
    assert {t["name"] for t in typed} >= {"gpu:h100", "gpu:a100"}


def test_squeue_and_sinfo_describe_now(full_run):
    squeue = json.loads((full_run / "slurm/squeue.json").read_text())["jobs"]
    sinfo = json.loads((full_run / "slurm/sinfo.json").read_text())["nodes"]
    assert {j["job_state"] for j in squeue} >= {"RUNNING"}
    detail = re.compile(r"^gpu:(h100|h200|a100):\d\(IDX:[0-9,-]+\)$")
    assert all(detail.match(d) for j in squeue for d in j["gres_detail"])
    assert len(sinfo) == 8 and all(n["gres"].endswith(":8") for n in sinfo)
    assert any(n["state"] == "down" and n["reason"] for n in sinfo)


# --- sacctmgr and sshare: pipe tables, as 22.05 prints them -----------------------------

_TRES = re.compile(r"^([a-z]+(/[a-z0-9:]+)?=\d+)(,[a-z]+(/[a-z0-9:]+)?=\d+)*$")
_FLOAT = re.compile(r"^\d+\.\d{6}$")


def _table(path: Path) -> tuple[str, list[list[str]]]:
    head, *rows = path.read_text().splitlines()
    return head, [row.split("|") for row in rows]


@pytest.mark.parametrize(("fixture", "output"), [
    ("sacctmgr_assoc.txt", "slurm/sacctmgr_assoc.txt"), ("sshare.txt", "slurm/sshare.txt")])
def test_the_association_and_fairshare_tables_have_the_recorded_columns(full_run, fixture,
                                                                        output):
    real_head, real = _table(FIXTURES / fixture)
    head, rows = _table(full_run / output)
    assert head == real_head
    assert {len(r) for r in rows} == {len(real[0])}
    # the same tree: root first, then root's user (after the Cluster column, if any)
    skip = 1 if head.startswith("Cluster|") else 0
    assert [r[skip:skip + 2] for r in rows[:2]] == [r[skip:skip + 2] for r in real[:2]]


def test_sshare_prints_numbers_and_tres_like_slurm(full_run):
    _, rows = _table(full_run / "slurm/sshare.txt")
    for account, user, shares, norm, raw_usage, eff, fs, level, _, run, raw in rows[1:]:
        assert shares.isdigit()
        depth = len(account) - len(account.lstrip())
        assert depth == (2 if user and account.strip() != "root" else 1)
        assert _FLOAT.match(norm) and _FLOAT.match(eff) and raw_usage.isdigit(), account
        assert level == "inf" or _FLOAT.match(level)
        assert (fs != "") == bool(user)  # FairShare on users only (Fair Tree)
        assert _TRES.match(run) and _TRES.match(raw)
        for tres in (run, raw):  # every TRES, in Slurm's id order, as the recording shows
            keys = [kv.split("=")[0] for kv in tres.split(",")]
            assert keys[:9] == _recorded_tres_order()[:9]
            assert keys[9:] == ["gres/gpu:h100", "gres/gpu:a100", "gres/gpu:h200"]


def _recorded_tres_order() -> list[str]:
    _, rows = _table(FIXTURES / "sshare.txt")
    return [kv.split("=")[0] for kv in rows[0][-1].split(",")]


def test_fairshare_follows_usage_and_the_limits_were_never_broken(full_run):
    from apps.clusters.adapters.slurm.parse_cluster import parse_sacctmgr_assoc, parse_sshare

    assocs = parse_sacctmgr_assoc((full_run / "slurm/sacctmgr_assoc.txt").read_text())
    shares = {(s.account, s.user): s for s in parse_sshare(
        (full_run / "slurm/sshare.txt").read_text())}
    accounts = {a.account for a in assocs if not a.user} - {"root"}
    assert accounts == {t["account"] for t in json.loads(
        (full_run / "cluster.json").read_text())["teams"]}
    users = [s for s in shares.values() if s.user]
    # Fair Tree: ranks k/N, each once
    assert sorted(round(s.fairshare * len(users)) for s in users) == list(
        range(1, len(users) + 1))
    for (account, user), row in shares.items():
        if row.effective_usage:
            assert row.level_fs == pytest.approx(row.norm_shares / row.effective_usage,
                                                 rel=1e-4)
        if not user:  # an account's usage is its users' sum
            members = [s for (a, u), s in shares.items() if a == account and u]
            assert row.raw_usage == pytest.approx(sum(m.raw_usage for m in members), abs=5)
    limited = {a.account: a for a in assocs if a.grp_tres_mins}
    assert set(limited) == {"robotics", "speech"}
    for account, assoc in limited.items():
        used = shares[(account, "")].grp_tres_raw["gres/gpu"]
        assert 0 < used < assoc.grp_tres_mins["gres/gpu"]
    (vision,) = [a for a in assocs if a.account == "vision" and not a.user]
    assert vision.grp_tres["gres/gpu"] >= _peak_gpus(full_run, "vision")


def test_jobs_wait_with_assoc_grp_gres_only_while_their_account_holds_its_limit(full_run):
    """The GrpTRES sacctmgr shows is the one the month enforced: the account reached it,
    and each job Slurm held with AssocGrpGRES waited while the account's running GPUs plus
    its own would have gone past it."""
    from apps.clusters.adapters.slurm.parse_cluster import parse_sacctmgr_assoc

    [limited] = [a for a in parse_sacctmgr_assoc(
        (full_run / "slurm/sacctmgr_assoc.txt").read_text()) if a.grp_tres and not a.user]
    limit = limited.grp_tres["gres/gpu"]
    jobs = [j for j in json.loads((full_run / "slurm/sacct.json").read_text())["jobs"]
            if j["account"] == limited.account]
    held = [j for j in jobs if j["state"]["reason"] == "AssocGrpGRES"]
    assert held and _peak_gpus(full_run, limited.account) == limit
    running = [(j["time"]["start"], j["time"]["end"] or 2**62, _gpus(j)) for j in jobs
               if j["time"]["start"] and _gpus(j)]
    for job in held:
        wait = range(job["time"]["eligible"], job["time"]["start"] or job["time"]["end"])
        assert any(sum(g for s, e, g in running if s <= t < e) + _gpus(job) > limit
                   for t in {s for s, _, _ in running} | {e for _, e, _ in running}
                   | {wait.start} if t in wait), job["job_id"]


def test_eligible_times_are_slurms_dependency_hold_and_throttle_releases(full_run):
    """``time.eligible``: submission for most jobs; for an afterok job its parent's end;
    for a held job its release (after submission); for an array task past its throttle the
    end of one of its array's tasks. The last such reason stays in ``state.reason`` (a job
    that then waited at its account's GPU limit says ``AssocGrpGRES``)."""
    truth = json.loads((full_run / "ground_truth.json").read_text())["jobs"]
    jobs = {j["job_id"]: j for j in json.loads((full_run / "slurm/sacct.json").read_text())[
        "jobs"]}
    reasons = Counter(j["state"]["reason"] for j in jobs.values() if j["time"]["start"])
    assert {"Dependency", "JobHeldUser", "JobArrayTaskLimit"} <= set(reasons)
    for job_id, job in jobs.items():
        t, after = job["time"], truth[str(job_id)]["after"]
        if after:
            assert t["eligible"] == jobs[after]["time"]["end"] > t["submission"]
            assert jobs[after]["state"]["current"] == "COMPLETED"
        elif job["state"]["reason"] == "JobHeldUser":
            assert t["eligible"] > t["submission"]
        elif job["state"]["reason"] == "JobArrayTaskLimit":
            ends = {j["time"]["end"] for j in jobs.values()
                    if j["array"]["job_id"] == job["array"]["job_id"]}
            assert t["eligible"] in ends
        elif job["state"]["reason"] == "None":
            assert t["eligible"] == t["submission"]
        else:  # AssocGrpGRES, which may come after a hold or a throttle
            assert job["state"]["reason"] == "AssocGrpGRES" and t["eligible"] >= t["submission"]
        if t["start"]:
            assert t["eligible"] <= t["start"]


def _gpus(job: dict) -> int:
    return sum(t["count"] for t in job["tres"]["allocated"]
               if t["type"] == "gres" and t["name"] == "gpu")


def _peak_gpus(root: Path, account: str) -> int:
    """Peak concurrent GPUs of an account, from the sacct records."""
    events = []
    for job in json.loads((root / "slurm/sacct.json").read_text())["jobs"]:
        start, end = job["time"]["start"], job["time"]["end"]
        gpus = sum(t["count"] for t in job["tres"]["allocated"]
                   if t["type"] == "gres" and t["name"] == "gpu")
        if job["account"] == account and start and gpus:
            events += [(start, gpus), (end or 2**62, -gpus)]
    peak = current = 0
    for _, delta in sorted(events):
        current += delta
        peak = max(peak, current)
    return peak
