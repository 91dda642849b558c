"""GPU-hour chargeback: who held which GPU-hours, what they were spent on, what they cost.

Pure functions over frozen dataclasses (no Django). The services feed them either job by job
(``usage_by_key``: the reference path, used by tests and the job-by-job reconciliation) or
grouped rows summed by the database (``spread_models``: the fast path); both meet in
``spread_models``, so a statement is the same whichever path built it.

**Accounting.** A job's allocated GPU-hours in a period are ``gpus x overlap``: Slurm's
allocation (``gres/gpu`` with MIG slices and ``gres/shard`` counted by their fraction, as
``Job.gpu_equivalent`` stores it, see ``gpu_allocation``) times the part of ``[start, end)``
inside ``[period start, period end)``. A job that spans a period edge is prorated by that
overlap, and its measured split (useful, waiting, held idle, no process: fractions of its whole
run, from the job archive) is assumed uniform over its run: each period gets the same fractions.
Hours of a job without telemetry are ``unmeasured``. A job holding GPUs of several models (a het
job) is spread over the models by their GPU-equivalents. Hours are floats while summed, as the
database sums them.

**Rounding.** Once per statement line, hours become ``Decimal`` rounded half-even to 0.0001 h
(0.36 s); the five parts are rounded by largest remainder so that they always add up to the
line's allocated hours exactly. A line's amount is ``charged hours x price`` rounded half-even
to the cent; a statement's total is the sum of its lines' amounts, so lines always add up.

**Rates.** A rate is a price per GPU-hour, valid over ``[start, end)`` (end open = still valid),
for a partition and a GPU model (either may be blank = any). The most specific rate wins:
partition and model, then model alone, then partition alone, then the default; among equals the
one that started last. A period is cut where any rate starts or ends (``segments``), so each
line has one price.

**Policies** (admins pick one per period): ``allocated`` charges every allocated hour
(showback of waste at full price); ``useful_plus_fee`` charges useful and unmeasured hours at
the rate, and wasted hours (waiting, held idle, no process) at ``waste_fee`` x the rate.
Unmeasured hours are never discounted: no telemetry is no evidence of waste.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from decimal import ROUND_HALF_EVEN, Decimal
from enum import StrEnum
from fractions import Fraction
from itertools import pairwise

HOURS_QUANTUM = Decimal("0.0001")
MONEY_QUANTUM = Decimal("0.01")
ROUNDING = ROUND_HALF_EVEN
UNKNOWN_MODEL = ""  # GPU model not recorded: priced by rates that apply to any model


class Policy(StrEnum):
    ALLOCATED = "allocated"
    USEFUL_PLUS_FEE = "useful_plus_fee"


class ChargebackError(ValueError):
    """Input the maths cannot price (a fee outside 0..1, an empty period)."""


@dataclass(frozen=True)
class Terms:
    """What a period's statements charge: the policy and, for ``useful_plus_fee``, the share of
    the rate charged per wasted hour (0 = waste is free, 1 = the same as ``allocated``)."""

    policy: Policy = Policy.ALLOCATED
    waste_fee: Decimal = Decimal("0")

    def __post_init__(self) -> None:
        if not Decimal("0") <= self.waste_fee <= Decimal("1"):
            raise ChargebackError(f"waste fee {self.waste_fee} must be between 0 and 1")


@dataclass(frozen=True)
class Period:
    """A half-open interval ``[start, end)`` of aware datetimes (a month, usually)."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise ChargebackError(f"period ends ({self.end}) before it starts ({self.start})")

    @classmethod
    def month(cls, year: int, month: int, tz: tzinfo = UTC) -> Period:
        start = datetime(year, month, 1, tzinfo=tz)
        end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=tz)
        return cls(start, end)

    @property
    def label(self) -> str:
        return f"{self.start:%Y-%m}"


# --- Fractional GPUs: MIG slices -----------------------------------------------------------

# Standard NVIDIA MIG profiles (the MIG User Guide's tables) -> the share of the parent GPU's
# compute they hold: N compute slices of the GPU's 7 (A100, H100, H200, B200), of 4 on the A30.
# Memory does not enter: a 1g.10gb on an A100-40GB is still one seventh of the GPU's compute.
# "+me" (media extensions) variants hold the same share. A site overrides or adds profiles
# per cluster (``Cluster.gpu_types``, see ``gpu_kinds``).
_SEVEN_SLICE_PROFILES = (
    "1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb",              # A100 40GB
    "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb",                         # A100/H100 80GB
    "1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb",              # H100 NVL 94GB
    "3g.48gb", "4g.48gb", "7g.96gb",                                               # H100/GH200 96GB
    "1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb",             # H200 141GB
    "1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb",             # B200 180GB
)
_FOUR_SLICE_PROFILES = ("1g.6gb", "2g.12gb", "4g.24gb")                            # A30 24GB
MIG_PROFILES: Mapping[str, Fraction] = {
    **{p: Fraction(int(p[0]), 7) for p in _SEVEN_SLICE_PROFILES},
    **{p: Fraction(int(p[0]), 4) for p in _FOUR_SLICE_PROFILES},
}
# A Slurm GPU type naming a MIG slice: the profile, optionally after the parent's name
# ("1g.10gb", "a100_1g.5gb", "nvidia_h100_80gb_hbm3_3g.40gb", "h100-2g.20gb+me").
_MIG_TYPE = re.compile(r"^(?:(?P<parent>.+?)[_-])?(?P<profile>(?P<slices>[1-7])g\.\d+gb)"
                       r"(?:\+me)?$", re.IGNORECASE)


@dataclass(frozen=True)
class GpuKind:
    """What one device of a Slurm GPU type is: the GPU model it is charged as, and the share
    of one such GPU it holds (1 for a whole GPU, 1/7 for a 1g.10gb MIG slice)."""

    model: str
    fraction: Fraction = Fraction(1)
    profile: str = ""  # the MIG profile, "" for a whole GPU


def gpu_kind(type_name: str, overrides: Mapping[str, GpuKind] | None = None) -> GpuKind:
    """The kind of a ``gres/gpu:<type>`` device.

    1. the cluster's own entry for that type name wins (``gpu_kinds``);
    2. a type shaped like a MIG profile is that share of its parent GPU: from ``MIG_PROFILES``,
       else (a profile the table lacks, e.g. ``3g.39gb`` as some drivers print it) N of 7
       compute slices; the model is the parent's name when the type carries one (``a100`` in
       ``a100_1g.5gb``), else the profile itself (the parent cannot be told from ``1g.10gb``
       alone: an A100-80GB and an H100 both have it);
    3. anything else is a whole GPU of that model.
    """
    if overrides and type_name in overrides:
        return overrides[type_name]
    match = _MIG_TYPE.match(type_name)
    if match is None:
        return GpuKind(type_name)
    profile = match["profile"].lower()
    fraction = MIG_PROFILES.get(profile, Fraction(int(match["slices"]), 7))
    return GpuKind(match["parent"] or profile, fraction, profile)


def gpu_kinds(entries: Iterable[Mapping[str, object]]) -> dict[str, GpuKind]:
    """A cluster's GPU type list (``[{"name": "1g.10gb", "parent": "h100", "fraction":
    "1/7"}]``) to overrides for ``gpu_kind``. Entries with neither ``parent`` nor
    ``fraction`` change nothing (they carry other settings, e.g. ``shards_per_gpu``).

    Raises ``ChargebackError`` naming the entry for a fraction that is not in (0, 1] or a
    name or parent that is not a non-empty string.
    """
    out: dict[str, GpuKind] = {}
    for entry in entries:
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ChargebackError(f"GPU type entry {dict(entry)!r} has no name")
        if "parent" not in entry and "fraction" not in entry:
            continue
        default = gpu_kind(name)
        parent = entry.get("parent", default.model)
        if not isinstance(parent, str) or not parent:
            raise ChargebackError(f"GPU type {name!r}: parent must be a GPU model name")
        fraction = _fraction(name, entry.get("fraction", default.fraction))
        out[name] = GpuKind(parent, fraction, default.profile)
    return out


def _fraction(name: str, value: object) -> Fraction:
    try:
        if isinstance(value, bool) or not isinstance(value, int | float | str | Fraction):
            raise TypeError
        fraction = Fraction(value).limit_denominator(1000)
    except (TypeError, ValueError, ZeroDivisionError):
        raise ChargebackError(f"GPU type {name!r}: fraction {value!r} is not a number "
                              "such as 0.25 or \"1/7\"") from None
    if not 0 < fraction <= 1:
        raise ChargebackError(f"GPU type {name!r}: fraction {value} must be in (0, 1]")
    return fraction


def gpu_allocation(gpus: int, types: Mapping[str, int],
                   overrides: Mapping[str, GpuKind] | None = None,
                   ) -> tuple[float, dict[str, float | int]]:
    """Slurm's ``gres/gpu`` devices to (GPU-equivalents, GPU-equivalents per model).

    ``gpus`` is Slurm's device count (a MIG slice is one device), ``types`` its per-type
    split (``{"a100_1g.5gb": 2}``). Devices of no type count as whole GPUs of no model; a
    model holding only whole GPUs keeps an integer count, so ``{"h100": 8}`` stays as it was.
    """
    per_model: dict[str, Fraction] = {}
    typed = 0
    for name, count in types.items():
        kind = gpu_kind(name, overrides)
        per_model[kind.model] = per_model.get(kind.model, Fraction(0)) + count * kind.fraction
        typed += count
    total = max(gpus - typed, 0) + sum(per_model.values(), Fraction(0))
    models = {m: int(v) if v.denominator == 1 else float(v)
              for m, v in sorted(per_model.items()) if v > 0}
    return float(total), models


# --- Hours ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Split:
    """Fractions of a job's allocated GPU-time by what the GPUs did (from the job archive).

    They may add up to less than 1 where telemetry covered only part of the job; the rest is
    unmeasured.
    """

    useful: float
    waiting: float = 0.0
    held_idle: float = 0.0
    no_process: float = 0.0


@dataclass(frozen=True)
class Hours:
    """GPU-hours: allocated, and how much of it was useful, waiting, held idle, no process."""

    allocated: float = 0.0
    useful: float = 0.0
    waiting: float = 0.0
    held_idle: float = 0.0
    no_process: float = 0.0

    @property
    def measured(self) -> float:
        return self.useful + self.waiting + self.held_idle + self.no_process

    @property
    def unmeasured(self) -> float:
        return max(self.allocated - self.measured, 0.0)

    @property
    def waste(self) -> float:
        return self.waiting + self.held_idle + self.no_process

    def plus(self, other: Hours) -> Hours:
        return Hours(self.allocated + other.allocated, self.useful + other.useful,
                     self.waiting + other.waiting, self.held_idle + other.held_idle,
                     self.no_process + other.no_process)

    def scaled(self, factor: float) -> Hours:
        return Hours(self.allocated * factor, self.useful * factor, self.waiting * factor,
                     self.held_idle * factor, self.no_process * factor)


@dataclass(frozen=True)
class JobUsage:
    """One job as chargeback sees it. ``end`` is the job's end, or "now" while it runs."""

    job_id: int
    team: str
    user: str
    partition: str
    gpus: float
    start: datetime
    end: datetime
    gpu_types: Mapping[str, float] = field(default_factory=dict)
    split: Split | None = None


def overlap_seconds(start: datetime, end: datetime, lo: datetime, hi: datetime) -> float:
    """Seconds of ``[start, end)`` inside ``[lo, hi)`` (0 when they do not meet)."""
    return max((min(end, hi) - max(start, lo)).total_seconds(), 0.0)


def job_hours(job: JobUsage, lo: datetime, hi: datetime) -> Hours:
    """The job's GPU-hours inside ``[lo, hi)``, split by its measured fractions."""
    allocated = job.gpus * overlap_seconds(job.start, job.end, lo, hi) / 3600
    if job.split is None:
        return Hours(allocated)
    s = job.split
    return Hours(allocated, allocated * s.useful, allocated * s.waiting,
                 allocated * s.held_idle, allocated * s.no_process)


UsageKey = tuple[str, str, str, str]  # (team, user, partition, GPU model)


@dataclass(frozen=True)
class GroupRow:
    """Hours of jobs sharing (team, user, partition, GPU types): a database GROUP BY row."""

    team: str
    user: str
    partition: str
    gpu_types: Mapping[str, float]
    hours: Hours


def model_shares(gpu_types: Mapping[str, float]) -> dict[str, float]:
    """``{"h100": 8}`` -> ``{"h100": 1.0}``; several models by GPU-equivalents; none -> unknown
    model."""
    counts = {m: float(n) for m, n in gpu_types.items() if float(n) > 0}
    total = sum(counts.values())
    if total <= 0:
        return {UNKNOWN_MODEL: 1.0}
    return {model: n / total for model, n in sorted(counts.items())}


def spread_models(rows: Iterable[GroupRow]) -> dict[UsageKey, Hours]:
    """Grouped rows to hours per (team, user, partition, GPU model)."""
    out: dict[UsageKey, Hours] = {}
    for row in rows:
        for model, share in model_shares(row.gpu_types).items():
            key = (row.team, row.user, row.partition, model)
            out[key] = out.get(key, Hours()).plus(row.hours.scaled(share))
    return out


def usage_by_key(jobs: Iterable[JobUsage], lo: datetime, hi: datetime) -> dict[UsageKey, Hours]:
    """The reference path: every job's hours in ``[lo, hi)``, then ``spread_models``."""
    rows = (GroupRow(j.team, j.user, j.partition, j.gpu_types, job_hours(j, lo, hi))
            for j in jobs)
    return {k: h for k, h in spread_models(rows).items() if h.allocated > 0}


# --- Rates -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rate:
    """A price per GPU-hour over ``[start, end)`` for a partition and GPU model ("" = any)."""

    price: Decimal
    start: datetime
    end: datetime | None = None
    partition: str = ""
    gpu_model: str = ""
    currency: str = "EUR"

    def applies(self, partition: str, model: str, at: datetime) -> bool:
        return (self.partition in ("", partition) and self.gpu_model in ("", model)
                and self.start <= at and (self.end is None or at < self.end))

    @property
    def specificity(self) -> int:
        return 2 * bool(self.gpu_model) + bool(self.partition)


def rate_for(rates: Sequence[Rate], partition: str, model: str, at: datetime) -> Rate | None:
    """The most specific rate in force at ``at`` (see the module docstring)."""
    fits = [r for r in rates if r.applies(partition, model, at)]
    return max(fits, key=lambda r: (r.specificity, r.start), default=None)


def segments(rates: Sequence[Rate], period: Period) -> list[Period]:
    """``period`` cut at every instant a rate starts or ends inside it."""
    cuts = {period.start, period.end}
    for rate in rates:
        cuts |= {t for t in (rate.start, rate.end) if t and period.start < t < period.end}
    ordered = sorted(cuts)
    return [Period(a, b) for a, b in pairwise(ordered)]


# --- Lines and money --------------------------------------------------------------------------


@dataclass(frozen=True)
class RoundedHours:
    """Hours of one line as Decimals whose parts add up to ``allocated`` exactly."""

    allocated: Decimal
    useful: Decimal
    waiting: Decimal
    held_idle: Decimal
    no_process: Decimal
    unmeasured: Decimal

    @property
    def waste(self) -> Decimal:
        return self.waiting + self.held_idle + self.no_process

    PARTS = ("useful", "waiting", "held_idle", "no_process", "unmeasured")


def round_hours(hours: Hours) -> RoundedHours:
    """Round to 0.0001 h; the parts by largest remainder so they sum to the allocated hours."""
    total = _quantize(hours.allocated, HOURS_QUANTUM)
    raw = [hours.useful, hours.waiting, hours.held_idle, hours.no_process, hours.unmeasured]
    whole = max(hours.allocated, sum(raw))  # fractions adding up past 1 are scaled down
    scale = float(total) / whole if whole > 0 else 0.0
    units = [max(v * scale, 0.0) / float(HOURS_QUANTUM) for v in raw]
    floors = [int(u) for u in units]
    short = int(total / HOURS_QUANTUM) - sum(floors)
    order = sorted(range(len(units)), key=lambda i: (floors[i] - units[i], i))
    for i in order[:max(short, 0)]:
        floors[i] += 1
    parts = [Decimal(n) * HOURS_QUANTUM for n in floors]
    return RoundedHours(total, *parts)


def _quantize(value: float | Decimal, quantum: Decimal) -> Decimal:
    return Decimal(str(value)).quantize(quantum, rounding=ROUNDING)


def charged_hours(hours: RoundedHours, terms: Terms) -> Decimal:
    """The hours a statement charges at the full rate under ``terms``."""
    if terms.policy == Policy.ALLOCATED:
        return hours.allocated
    charged = hours.useful + hours.unmeasured + hours.waste * terms.waste_fee
    return charged.quantize(HOURS_QUANTUM, rounding=ROUNDING)


def money(hours: Decimal, price: Decimal) -> Decimal:
    return (hours * price).quantize(MONEY_QUANTUM, rounding=ROUNDING)


@dataclass(frozen=True)
class Line:
    """One statement line: a (user, partition, GPU model) over one rate segment."""

    team: str
    user: str
    partition: str
    gpu_model: str
    start: datetime
    end: datetime
    hours: RoundedHours
    charged_hours: Decimal
    price: Decimal | None
    currency: str
    amount: Decimal
    useful_amount: Decimal  # the same line charged at useful (and unmeasured) hours only

    @property
    def priced(self) -> bool:
        return self.price is not None


def price_lines(usage: Mapping[UsageKey, Hours], segment: Period, rates: Sequence[Rate],
                terms: Terms) -> list[Line]:
    """Statement lines for one rate segment; a key with no rate gets price None and 0.00."""
    useful_only = Terms(Policy.USEFUL_PLUS_FEE, Decimal("0"))
    lines = []
    for (team, user, partition, model), hours in sorted(usage.items()):
        rate = rate_for(rates, partition, model, segment.start)
        rounded = round_hours(hours)
        charged = charged_hours(rounded, terms)
        price = rate.price if rate else None
        lines.append(Line(
            team, user, partition, model, segment.start, segment.end, rounded, charged,
            price, rate.currency if rate else "", money(charged, price or Decimal(0)),
            money(charged_hours(rounded, useful_only), price or Decimal(0))))
    return lines


# --- Statement totals ---------------------------------------------------------------------


@dataclass(frozen=True)
class Totals:
    """A statement's sums: the lines' amounts and hours, added as Decimals."""

    allocated: Decimal
    useful: Decimal
    waiting: Decimal
    held_idle: Decimal
    no_process: Decimal
    unmeasured: Decimal
    charged_hours: Decimal
    amount: Decimal
    useful_amount: Decimal

    @property
    def waste(self) -> Decimal:
        return self.waiting + self.held_idle + self.no_process

    @property
    def waste_share(self) -> float:
        """Wasted hours over measured hours (0 when nothing was measured)."""
        measured = self.allocated - self.unmeasured
        return float(self.waste / measured) if measured > 0 else 0.0


def totals(lines: Iterable[Line]) -> Totals:
    sums = dict.fromkeys(("allocated", *RoundedHours.PARTS, "charged_hours", "amount",
                          "useful_amount"), Decimal(0))
    for line in lines:
        for part in ("allocated", *RoundedHours.PARTS):
            sums[part] += getattr(line.hours, part)
        sums["charged_hours"] += line.charged_hours
        sums["amount"] += line.amount
        sums["useful_amount"] += line.useful_amount
    return Totals(**sums)


def statement_lines(usage_by_segment: Mapping[Period, Mapping[UsageKey, Hours]],
                    rates: Sequence[Rate], terms: Terms) -> dict[str, list[Line]]:
    """Every team's lines over all segments, by team (the statements of one period)."""
    out: dict[str, list[Line]] = {}
    for segment, usage in sorted(usage_by_segment.items(), key=lambda kv: kv[0].start):
        for line in price_lines(usage, segment, rates, terms):
            out.setdefault(line.team, []).append(line)
    return out
