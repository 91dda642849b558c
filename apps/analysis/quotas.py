"""Team GPU-hour quotas: checking a new value, usage against it, the exhaustion forecast.

Slurm holds a quota as ``GrpTRESMins=gres/gpu=N`` in GPU-*minutes*; the portal speaks GPU-hours
and converts exactly (a value that is not a whole number of minutes is refused rather than
rounded). Pure: the services read usage and write Slurm.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation

WARNING_LEVELS = (80, 100)  # percent of the quota that sends a warning
SLURM_MAX_MINUTES = 2**63 - 1  # sacctmgr stores uint64; beyond that it wraps (see docs)


class QuotaValueError(ValueError):
    """A quota value the portal refuses, with a message for the admin."""


def quota_minutes(hours: str | Decimal, ceiling_hours: Decimal) -> int:
    """GPU-hours typed by an admin -> GPU-minutes for Slurm, or ``QuotaValueError``.

    Refused: not a number, negative (sacctmgr would store -5 as 18446744073709551611),
    not a whole number of GPU-minutes, or above ``ceiling_hours`` (an absurd value: more
    than the cluster could deliver, usually a typo).
    """
    try:
        value = Decimal(str(hours).strip())
    except InvalidOperation:
        raise QuotaValueError(f"{hours!r} is not a number of GPU-hours") from None
    if not value.is_finite():
        raise QuotaValueError(f"{hours!r} is not a number of GPU-hours")
    if value < 0:
        raise QuotaValueError(f"a quota cannot be negative ({value} GPU-hours)")
    minutes = value * 60
    if minutes != minutes.to_integral_value():
        raise QuotaValueError(f"{value} GPU-hours is not a whole number of GPU-minutes "
                              "(Slurm counts quotas in minutes)")
    return checked_minutes(int(minutes), ceiling_hours)


def checked_minutes(minutes: int, ceiling_hours: Decimal) -> int:
    """GPU-minutes (the API's unit) refused when negative or above ``ceiling_hours``."""
    if minutes < 0:
        raise QuotaValueError(f"a quota cannot be negative ({minutes} GPU-minutes)")
    if minutes > ceiling_hours * 60:
        raise QuotaValueError(f"{Decimal(minutes) / 60:.2f} GPU-hours is more than this "
                              f"cluster can deliver in the period x 10 ({ceiling_hours} "
                              "GPU-hours): refused as absurd")
    return min(minutes, SLURM_MAX_MINUTES)


def ceiling_hours(gpus: int, period_hours: float, factor: int = 10) -> Decimal:
    """The largest quota accepted: ``factor`` x the cluster's GPU-hours in the period."""
    return Decimal(max(gpus, 1)) * Decimal(str(round(period_hours, 4))) * factor


@dataclass(frozen=True)
class QuotaStatus:
    """Usage against a quota now, the burn rate, and when it runs out at that rate."""

    limit_hours: float
    used_hours: float
    burn_hours_per_day: float
    exhausted_at: datetime | None
    level: int  # the highest warning level reached (0, 80 or 100)

    @property
    def fraction(self) -> float:
        return self.used_hours / self.limit_hours if self.limit_hours > 0 else 1.0

    @property
    def percent(self) -> float:
        return round(100 * self.fraction, 1)

    @property
    def remaining_hours(self) -> float:
        return max(self.limit_hours - self.used_hours, 0.0)


def level_for(used: float, limit: float) -> int:
    """The highest warning level reached: 0, 80 or 100 (a zero quota is reached at once)."""
    fraction = used / limit if limit > 0 else 1.0
    reached = [lvl for lvl in WARNING_LEVELS if fraction * 100 >= lvl]
    return max(reached, default=0)


def forecast(used: float, limit: float, burn_per_day: float, now: datetime) -> datetime | None:
    """When usage reaches the limit at the current burn; now if it already has; None if never."""
    if used >= limit:
        return now
    if burn_per_day <= 0:
        return None
    return now + timedelta(days=(limit - used) / burn_per_day)


def quota_status(limit_hours: float, used_hours: float, burn_hours_per_day: float,
                 now: datetime) -> QuotaStatus:
    return QuotaStatus(limit_hours, used_hours, burn_hours_per_day,
                       forecast(used_hours, limit_hours, burn_hours_per_day, now),
                       level_for(used_hours, limit_hours))
