"""Plausibility at the door: what is flagged, in what words, and what real sites produce
that never is (table tests)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from apps.analysis.plausibility import Capacity, Claim, cannot_be_right, reasons

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
SUBMIT = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
CLUSTER = Capacity(gpus=128, nodes=16, shards_per_gpu=4)
UNKNOWN = Capacity()  # no nodes synced yet


def job(**fields) -> Claim:
    """A finished 8-GPU job of one hour, 30 minutes after its submit, 2-hour limit."""
    base = Claim(submit_time=SUBMIT, eligible_time=SUBMIT,
                 start_time=SUBMIT + timedelta(minutes=30),
                 end_time=SUBMIT + timedelta(minutes=90), time_limit_min=120, gpus=8,
                 cpus=64, node_count=1, memory_mb=512_000)
    return replace(base, **fields)


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 11, 2, hour, minute, tzinfo=UTC)


# --- Flagged, in words a person reads ---------------------------------------------------------


@pytest.mark.parametrize(("record", "capacity", "expected"), [
    (job(gpus=10**12), CLUSTER, ["claims 1,000,000,000,000 GPUs; the cluster has 128"]),
    (job(gpus=129), CLUSTER, ["claims 129 GPUs; the cluster has 128"]),
    (job(gpus=2_000_000), UNKNOWN,
     ["claims 2,000,000 GPUs; more than any cluster has (this cluster's GPUs are not known: "
      "none of its synced nodes reports them)"]),
    (job(gpu_shards=1000), CLUSTER,
     ["claims 1,000 GPU shards (250 GPUs' worth); the cluster has 128"]),
    (job(node_count=17), CLUSTER, ["claims 17 nodes; the cluster has 16"]),
    (job(cpus=10**9), CLUSTER, ["claims 1,000,000,000 CPUs, more than any cluster has"]),
    (job(memory_mb=10**12), CLUSTER,
     ["claims 1,000,000,000,000 MB of memory, more than any cluster has"]),
    (job(cpus=-4), CLUSTER, ["claims -4 CPUs, a negative count"]),
    (job(start_time=at(11), end_time=at(10)), CLUSTER,
     ["ends before it starts (end 2026-11-02 10:00, start 2026-11-02 11:00 UTC)"]),
    (job(start_time=at(9)), CLUSTER,
     ["starts before it was submitted (start 2026-11-02 09:00, submitted 2026-11-02 10:00 UTC)"]),
    (job(start_time=None, end_time=at(9)), CLUSTER,
     ["ends before it was submitted (end 2026-11-02 09:00, submitted 2026-11-02 10:00 UTC)"]),
    (job(submit_time=datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC), eligible_time=None), CLUSTER,
     ["submitted in 1970, before 2000 (no Slurm record is that old)"]),
    (job(eligible_time=datetime(1999, 12, 31, tzinfo=UTC)), CLUSTER,
     ["eligible in 1999, before 2000 (no Slurm record is that old)"]),
    (job(time_limit_min=None, start_time=datetime(2310, 1, 1, tzinfo=UTC),
         end_time=datetime(2310, 1, 2, tzinfo=UTC)), CLUSTER,
     ["starts in 2310, centuries from now", "ends in 2310, centuries from now"]),
    (job(time_limit_min=None, end_time=datetime(2400, 1, 1, tzinfo=UTC)), CLUSTER,
     ["ends in 2400, centuries from now"]),
    (job(time_limit_min=None, end_time=datetime(2140, 1, 1, tzinfo=UTC)), CLUSTER,
     ["ends in 2140, a century or more from now"]),
    (job(time_limit_min=None, end_time=datetime(2050, 1, 1, tzinfo=UTC)), CLUSTER,
     ["ends in 2050, decades from now"]),
    (job(time_limit_min=None, end_time=datetime(2030, 1, 1, tzinfo=UTC)), CLUSTER,
     ["ends in 2030, years from now"]),
    (job(time_limit_min=None, end_time=datetime(2028, 3, 1, tzinfo=UTC)), CLUSTER,
     ["ends in 2028, more than a year from now"]),
    # a one-day job that "ran" 400 days: past its limit plus the longest OverTimeLimit
    (job(time_limit_min=1440, end_time=SUBMIT + timedelta(minutes=30, days=400)), CLUSTER,
     ["ran 400 days, longer than its time limit of 24 hours allows (even with Slurm's "
      "longest OverTimeLimit)"]),
    # still running after two years of a two-hour limit (started 2024)
    (job(start_time=datetime(2024, 11, 1, tzinfo=UTC), submit_time=datetime(2024, 11, 1,
         tzinfo=UTC), eligible_time=None, end_time=None), CLUSTER,
     ["ran 766 days, longer than its time limit of 2 hours allows (even with Slurm's "
      "longest OverTimeLimit)"]),
])
def test_it_says_why_a_record_is_implausible(record, capacity, expected):
    assert reasons(record, capacity, NOW) == expected


def test_every_reason_of_one_record_is_listed():
    record = job(gpus=10**12, start_time=at(11), end_time=at(10))
    assert reasons(record, CLUSTER, NOW) == [
        "claims 1,000,000,000,000 GPUs; the cluster has 128",
        "ends before it starts (end 2026-11-02 10:00, start 2026-11-02 11:00 UTC)"]


# --- What real sites produce is never flagged -------------------------------------------------


@pytest.mark.parametrize(("record", "capacity"), [
    (job(), CLUSTER),
    (job(gpus=128, node_count=16), CLUSTER),  # the whole cluster
    (job(gpu_shards=512, gpus=0), CLUSTER),  # every shard of it
    # capacity unknown (no nodes synced, or a node sync that reads no gres): only bounds
    # above any machine on earth apply
    (job(gpus=75_264, node_count=9_408), UNKNOWN),  # all of Frontier's GPU dies
    (job(gpus=4096, node_count=512), Capacity(gpus=None, nodes=None)),
    # clock skew of seconds, up to MUNGE's five minutes
    (job(start_time=SUBMIT - timedelta(seconds=40)), CLUSTER),
    (job(start_time=at(11), end_time=at(11) - timedelta(minutes=4)), CLUSTER),
    # cancelled before it started: start = end, or no start at all
    (job(start_time=at(10, 1), end_time=at(10, 1), node_count=0, gpus=0), CLUSTER),
    (job(start_time=None, end_time=at(10, 5), node_count=0), CLUSTER),
    # pending: no start, no end; an array's pending remainder the same
    (job(start_time=None, end_time=None, node_count=0), CLUSTER),
    # eligible in the future is a plan: --begin a year ahead, or Slurm's INFINITE (year 2106)
    # for tasks held by the array's task limit
    (job(start_time=None, end_time=None, eligible_time=datetime(2106, 2, 7, tzinfo=UTC)),
     CLUSTER),
    (job(start_time=None, end_time=None, eligible_time=NOW + timedelta(days=700)), CLUSTER),
    # requeued: submitted again when the previous run ended, starts after that
    (job(submit_time=at(12), eligible_time=at(12, 2), start_time=at(12, 2), end_time=at(13)),
     CLUSTER),
    # a service with time limit UNLIMITED running for months; Slurm's 0 "no limit imposed";
    # v0.0.38's plain 0xffffffff for UNLIMITED
    (job(time_limit_min=None, end_time=None, submit_time=datetime(2026, 3, 1, tzinfo=UTC),
         eligible_time=None, start_time=datetime(2026, 3, 1, 0, 1, tzinfo=UTC)), CLUSTER),
    (job(time_limit_min=0, end_time=SUBMIT + timedelta(days=200)), CLUSTER),
    (job(time_limit_min=0xFFFFFFFF, end_time=SUBMIT + timedelta(days=300)), CLUSTER),
    # over its limit, within OverTimeLimit's longest or a long suspension: not flagged
    (job(time_limit_min=60, end_time=SUBMIT + timedelta(days=30)), CLUSTER),
    # a skewed Slurm host a few hours (or months) ahead of Beacon's clock
    (job(submit_time=NOW + timedelta(hours=3), eligible_time=None,
         start_time=NOW + timedelta(hours=3, minutes=1), end_time=None), CLUSTER),
    (job(submit_time=NOW + timedelta(days=300), eligible_time=None, start_time=None,
         end_time=None), CLUSTER),
    # the first days of 2000 are accepted
    (job(submit_time=datetime(2000, 1, 1, tzinfo=UTC), eligible_time=None,
         start_time=datetime(2000, 1, 1, 0, 1, tzinfo=UTC),
         end_time=datetime(2000, 1, 1, 1, 0, tzinfo=UTC)), CLUSTER),
])
def test_it_never_flags_what_real_sites_produce(record, capacity):
    assert reasons(record, capacity, NOW) == []


def test_a_cluster_without_gpu_nodes_is_not_taken_to_have_no_gpus():
    """A node sync that cannot read gres (0 GPUs everywhere) must not flag every GPU job."""
    assert reasons(job(gpus=8), Capacity(gpus=0, nodes=4), NOW) == []
    assert reasons(job(gpus=8, node_count=5), Capacity(gpus=0, nodes=4), NOW) == [
        "claims 5 nodes; the cluster has 4"]


def test_a_shard_count_is_read_in_gpus_worth():
    one_shard_each = Capacity(gpus=128, nodes=16, shards_per_gpu=1)
    assert reasons(job(gpu_shards=129), one_shard_each, NOW) != []
    assert reasons(job(gpu_shards=129), CLUSTER, NOW) == []  # 4 shards a GPU: 32 GPUs


@pytest.mark.parametrize(("record", "why"), [
    (job(gpus=129), ""),  # more than this cluster has: a cluster that shrank may explain it
    (job(start_time=at(11), end_time=at(10)), ""),
    (job(gpus=10**12), "it claims more than any cluster has"),
    (job(gpu_shards=4 * 10**6 + 4), "it claims more than any cluster has"),
    (job(node_count=2_000_000), "it claims more than any cluster has"),
    (job(cpus=10**9), "it claims more than any cluster has"),
    (job(memory_mb=10**12), "it claims more than any cluster has"),
    (job(gpus=-1), "it claims a negative count"),
])
def test_only_records_that_could_be_right_may_be_accepted(record, why):
    assert cannot_be_right(record, shards_per_gpu=4) == why
