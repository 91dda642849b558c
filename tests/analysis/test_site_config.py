"""Site configuration as pure functions: recurring quiet windows (time zones, midnight,
daylight saving), component names and aliases, SSH sources per kind of user, InfiniBand
baselines per node group or partition. Tables of cases; no database."""

from __future__ import annotations

import ipaddress
from datetime import UTC, date, datetime, time
from zoneinfo import ZoneInfo

import pytest

from apps.analysis.components import ALIASES, alias_table, canonical, normalise, split
from apps.analysis.recurrence import Recurrence, check_zone, describe, parse_weekdays
from apps.analysis.security_net import login_source
from apps.analysis.security_types import Allow, IbBaseline, QuietWindow, SshSource

BERLIN = "Europe/Berlin"


def at(text: str, tz: str = BERLIN) -> float:
    """A local wall-clock time ("2026-11-03 04:02", fold 0) as unix seconds."""
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(tz)).timestamp()


DAILY_4AM = Recurrence(time(4, 0), 5, tz=BERLIN)
LATE = Recurrence(time(23, 55), 10, tz=BERLIN)                       # crosses midnight
SUNDAY_NIGHT = Recurrence(time(22, 0), 240, parse_weekdays("sun"), BERLIN)
TUESDAY = Recurrence(time(8, 0), 360, parse_weekdays("tue"), "UTC")
TOKYO = Recurrence(time(4, 0), 5, tz="Asia/Tokyo")
SPRING = Recurrence(time(2, 30), 30, tz=BERLIN)                       # 02:30 is skipped once
BOUNDED = Recurrence(time(4, 0), 5, tz=BERLIN, first=date(2026, 11, 2), last=date(2026, 11, 4))
LONG = Recurrence(time(20, 0), 2 * 1440 + 60, parse_weekdays("fri"), "UTC")  # Fri 20:00 - Sun 21:00

RECURRENCE_CASES = [
    # (name, recurrence, instant, covered)
    ("daily 04:00: at the start", DAILY_4AM, at("2026-11-03 04:00"), True),
    ("daily 04:00: 4 min 59 s in", DAILY_4AM, at("2026-11-03 04:04:59"), True),
    ("daily 04:00: the end is open", DAILY_4AM, at("2026-11-03 04:05"), False),
    ("daily 04:00: a minute before", DAILY_4AM, at("2026-11-03 03:59"), False),
    ("daily 04:00 Berlin is 03:00 UTC in winter", DAILY_4AM, at("2026-11-03 03:02", "UTC"), True),
    ("daily 04:00 Berlin is not 04:00 UTC", DAILY_4AM, at("2026-11-03 04:02", "UTC"), False),
    ("daily 04:00 Berlin is 02:00 UTC in summer", DAILY_4AM, at("2026-07-03 02:02", "UTC"), True),
    ("daily 04:00 Tokyo is 19:00 UTC the day before", TOKYO, at("2026-11-02 19:03", "UTC"), True),
    ("23:55 + 10 min: before midnight", LATE, at("2026-11-03 23:58"), True),
    ("23:55 + 10 min: after midnight (yesterday's window)", LATE, at("2026-11-04 00:04"), True),
    ("23:55 + 10 min: over", LATE, at("2026-11-04 00:05"), False),
    ("Sunday 22:00 + 4 h: Monday 01:00", SUNDAY_NIGHT, at("2026-11-09 01:00"), True),
    ("Sunday 22:00 + 4 h: Monday 02:00 is over", SUNDAY_NIGHT, at("2026-11-09 02:00"), False),
    ("Sunday 22:00 + 4 h: Monday 22:30 (not a Sunday)", SUNDAY_NIGHT, at("2026-11-09 22:30"),
     False),
    ("Sunday 22:00 + 4 h: Saturday 23:00 (not a Sunday)", SUNDAY_NIGHT, at("2026-11-07 23:00"),
     False),
    ("Tuesday 08:00 + 6 h UTC: Tuesday noon", TUESDAY, at("2026-11-03 12:00", "UTC"), True),
    ("Tuesday 08:00 + 6 h UTC: Wednesday noon", TUESDAY, at("2026-11-04 12:00", "UTC"), False),
    ("Fri 20:00 for 49 h: Saturday noon (two days back)", LONG, at("2026-11-07 12:00", "UTC"),
     True),
    ("Fri 20:00 for 49 h: Sunday 20:30", LONG, at("2026-11-08 20:30", "UTC"), True),
    ("Fri 20:00 for 49 h: Sunday 21:00 is over", LONG, at("2026-11-08 21:00", "UTC"), False),
    ("spring forward: 02:30 does not exist, the window starts at 03:30 CEST", SPRING,
     at("2026-03-29 01:35", "UTC"), True),
    ("spring forward: 03:10 CEST is before it", SPRING, at("2026-03-29 01:10", "UTC"), False),
    ("spring forward: the day after at 02:40", SPRING, at("2026-03-30 02:40"), True),
    ("fall back: the first 04:00 (CET, one pass only)", DAILY_4AM, at("2026-10-25 03:01", "UTC"),
     True),
    ("bounded: before the first day", BOUNDED, at("2026-11-01 04:01"), False),
    ("bounded: on the first day", BOUNDED, at("2026-11-02 04:01"), True),
    ("bounded: on the last day", BOUNDED, at("2026-11-04 04:01"), True),
    ("bounded: after the last day", BOUNDED, at("2026-11-05 04:01"), False),
]


@pytest.mark.parametrize(("name", "rec", "instant", "covered"), RECURRENCE_CASES,
                         ids=[c[0] for c in RECURRENCE_CASES])
def test_recurrence_covers(name: str, rec: Recurrence, instant: float, covered: bool) -> None:
    assert rec.active(instant) is covered


def test_fall_back_keeps_the_duration_in_real_minutes() -> None:
    # 2026-10-25 in Berlin: 02:00-03:00 happens twice; a 02:30 window starts at the first.
    rec = Recurrence(time(2, 30), 45, tz=BERLIN)
    [(begin, end)] = rec.occurrences(at("2026-10-25 00:00"), at("2026-10-25 12:00"))
    assert datetime.fromtimestamp(begin, UTC) == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert end - begin == 45 * 60


def test_occurrences_list_the_windows_of_a_week() -> None:
    found = DAILY_4AM.occurrences(at("2026-11-02 00:00"), at("2026-11-09 00:00"))
    assert [datetime.fromtimestamp(b, ZoneInfo(BERLIN)).strftime("%a %H:%M") for b, _ in found] \
        == ["Mon 04:00", "Tue 04:00", "Wed 04:00", "Thu 04:00", "Fri 04:00", "Sat 04:00",
            "Sun 04:00"]
    # a window that started before the range and still runs in it is listed
    [(begin, _)] = LATE.occurrences(at("2026-11-04 00:01"), at("2026-11-04 00:03"))
    assert begin == at("2026-11-03 23:55")
    # November 2026 has five Sundays (the 1st is one)
    assert len(SUNDAY_NIGHT.occurrences(at("2026-11-01 00:00"), at("2026-11-30 00:00"))) == 5


@pytest.mark.parametrize(("text", "days"), [
    ("", set()), ("tue", {1}), ("Mon, Thu", {0, 3}), ("mon-fri", {0, 1, 2, 3, 4}),
    ("fri-mon", {4, 5, 6, 0}), ("sunday", {6}), ("sat sun", {5, 6}),
])
def test_weekdays_are_read(text: str, days: set[int]) -> None:
    assert parse_weekdays(text) == frozenset(days)


@pytest.mark.parametrize("text", ["tues-x", "monday-", "1", "weekend"])
def test_bad_weekdays_are_named(text: str) -> None:
    with pytest.raises(ValueError, match="not a weekday"):
        parse_weekdays(text)


def test_zones_are_checked_and_windows_described() -> None:
    assert check_zone(BERLIN) == "" and "not a time zone" in check_zone("Mars/Olympus")
    assert describe(DAILY_4AM) == "daily at 04:00 for 5 min (Europe/Berlin)"
    assert describe(TUESDAY) == "tue at 08:00 for 6 h (UTC)"


# --- Quiet windows scoped to nodes or GPUs --------------------------------------------------

HEALTH = QuietWindow("gpu0*", reason="health check", gpus=frozenset({"3", "GPU-abc"}),
                     every=DAILY_4AM)


@pytest.mark.parametrize(("name", "host", "instant", "gpu", "uuid", "quiet"), [
    ("GPU 3 during the check", "gpu01", at("2026-11-03 04:01"), 3, "", True),
    ("GPU 3 after the check", "gpu01", at("2026-11-03 04:06"), 3, "", False),
    ("GPU 2 during the check", "gpu01", at("2026-11-03 04:01"), 2, "", False),
    ("the GPU named by UUID", "gpu02", at("2026-11-03 04:01"), 5, "GPU-abc", True),
    ("the node itself (InfiniBand) during the check", "gpu01", at("2026-11-03 04:01"), None, "",
     False),
    ("GPU 3 of a node outside the glob", "gpu11", at("2026-11-03 04:01"), 3, "", False),
])
def test_gpu_scoped_windows(name: str, host: str, instant: float, gpu: int | None, uuid: str,
                            quiet: bool) -> None:
    assert HEALTH.covers(host, instant, gpu, uuid) is quiet


def test_node_windows_cover_every_gpu_and_the_node_and_respect_their_bounds() -> None:
    maintenance = QuietWindow("gpu01", start=at("2026-11-01 00:00"), end=at("2026-12-01 00:00"),
                              every=TUESDAY)
    tuesday = at("2026-11-03 09:00", "UTC")
    assert maintenance.covers("gpu01", tuesday) and maintenance.covers("gpu01", tuesday, 7)
    assert not maintenance.covers("gpu01", at("2026-12-08 09:00", "UTC"))  # after its end
    allow = Allow(quiet=(HEALTH, maintenance))
    assert allow.quiet_reason("gpu01", at("2026-11-03 04:01"), 3) == "health check"
    assert allow.quiet_reason("gpu01", at("2026-11-03 04:01"), 2) == ""


# --- Component names --------------------------------------------------------------------------

COMPONENT_CASES = [
    ("torch", "pytorch"), ("PyTorch", "pytorch"), ("pytorch", "pytorch"), ("py-torch", "pytorch"),
    ("nvidia-container-toolkit", "nvidia_container_toolkit"),
    ("nvidia_container_toolkit", "nvidia_container_toolkit"),
    ("NVIDIA Container Toolkit", "nvidia_container_toolkit"),
    ("nvidia--container__toolkit ", "nvidia_container_toolkit"),
    ("nvidia-ctk", "nvidia_container_toolkit"),
    ("nvidia-container-toolkit-base", "nvidia_container_toolkit"),
    ("slurm-wlm", "slurm"), ("slurmd", "slurm"), ("Slurm", "slurm"),
    ("munged", "munge"), ("MUNGE", "munge"),
    ("nvidia-container-runtime", "nvidia_container_runtime"),  # another version stream
    ("libnvidia-container1", "libnvidia_container1"),
    ("torchvision", "torchvision"),  # not torch
    ("", ""), ("  ", ""),
]


@pytest.mark.parametrize(("name", "expected"), COMPONENT_CASES, ids=[c[0] or "empty"
                                                                     for c in COMPONENT_CASES])
def test_component_names(name: str, expected: str) -> None:
    assert canonical(name) == expected


@pytest.mark.parametrize(("key", "expected"), [
    ("torch:ml/2024.1", ("pytorch", "ml/2024.1")), ("pytorch", ("pytorch", "")),
    ("nvidia-container-toolkit: rpm", ("nvidia_container_toolkit", "rpm")),
    (42, ("", "")),
])
def test_inventory_keys_carry_a_qualifier(key: object, expected: tuple[str, str]) -> None:
    assert split(key) == expected


def test_site_aliases_extend_and_redirect_the_built_in_ones() -> None:
    table = alias_table({"PT": "PyTorch", "slurmd": "slurm-daemon", "": "x"})
    assert canonical("pt", table) == "pytorch" and canonical("torch", table) == "pytorch"
    assert canonical("slurmd", table) == "slurm_daemon"
    assert "" not in table and all(k == normalise(k) for k in ALIASES)
    assert normalise(None) == ""


# --- SSH sources per kind of user ---------------------------------------------------------------

NETS = [(ipaddress.ip_network(s.network), s) for s in (
    SshSource("10.20.0.0/24", "everyone", "login nodes"),
    SshSource("10.30.0.5/32", "admins", "admin bastion"),
    SshSource("10.40.0.0/28", "service", "health-check runners"),
    SshSource("fd00:20::/64", "everyone", "login nodes v6"),
)]


@pytest.mark.parametrize(("kind", "address", "allowed", "why"), [
    ("users", "10.20.0.7", True, ""),
    ("admins", "10.20.0.7", True, ""),            # login nodes are for everyone
    ("admins", "10.30.0.5", True, ""),
    ("users", "10.30.0.5", False, "admin bastion is for admins only"),
    ("service", "10.30.0.5", False, "admin bastion is for admins only"),
    ("service", "10.40.0.3", True, ""),
    ("users", "10.40.0.3", False, "health-check runners is for service only"),
    ("users", "192.168.1.9", False, "in no allowed network"),
    ("admins", "192.168.1.9", False, "in no allowed network"),
    ("users", "fd00:20::1", True, ""),
    ("users", "not-an-ip", False, "'not-an-ip' is not an address"),
])
def test_login_sources(kind: str, address: str, allowed: bool, why: str) -> None:
    verdict = login_source(kind, address, NETS)
    assert (verdict is None) is allowed and (verdict or "") == why


def test_user_kinds() -> None:
    allow = Allow(admin_users=frozenset({"root"}), exempt_users=frozenset({"healthchk"}))
    assert [allow.user_kind(u) for u in ("root", "healthchk", "bob")] == \
        ["admins", "service", "users"]


# --- InfiniBand baselines -------------------------------------------------------------------------

BASELINES = Allow(
    ib_baselines=(IbBaseline(8e9, hosts="gpu1*", name="storage-heavy rack"),
                  IbBaseline(5e9, partition="lustre-io"),
                  IbBaseline(3e9, hosts="gpu2*")),
    partitions={"gpu11": frozenset({"lustre-io", "gpu"}), "gpu21": frozenset({"lustre-io"}),
                "gpu31": frozenset({"gpu"})})


@pytest.mark.parametrize(("host", "bps", "source"), [
    ("gpu11", 8e9, "storage-heavy rack"),      # rack and partition: the larger
    ("gpu21", 5e9, "partition lustre-io"),     # partition beats the smaller group
    ("gpu22", 3e9, "nodes gpu2*"),
    ("gpu31", 2e9, "rule default"),
    ("login1", 2e9, "rule default"),
])
def test_ib_baseline_per_group_or_partition(host: str, bps: float, source: str) -> None:
    assert BASELINES.ib_baseline(host, 2e9) == (bps, source)
