"""Slurm host list expressions: ``gpu[01-04,07]``."""

from __future__ import annotations

import re
from collections.abc import Iterable

_NAME = re.compile(r"^(.*?)(\d+)$")


def compress(names: Iterable[str]) -> str:
    """Fold node names into Slurm's bracket form, keeping zero padding."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for name in names:
        match = _NAME.match(name)
        if not match:
            plain.append(name)
            continue
        prefix, digits = match.groups()
        groups.setdefault((prefix, len(digits)), []).append(int(digits))
    parts = plain + [_fold(prefix, width, sorted(set(nums)))
                     for (prefix, width), nums in groups.items()]
    return ",".join(parts)


def _fold(prefix: str, width: int, nums: list[int]) -> str:
    if len(nums) == 1:
        return f"{prefix}{nums[0]:0{width}d}"
    return f"{prefix}[{ranges(nums, width)}]"


def ranges(nums: list[int], width: int = 1) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5`` (GPU indices in ``IDX:``, node numbers in brackets)."""
    runs: list[list[int]] = []
    for num in nums:
        if runs and num == runs[-1][-1] + 1:
            runs[-1].append(num)
        else:
            runs.append([num])
    return ",".join(f"{r[0]:0{width}d}" if len(r) == 1 else f"{r[0]:0{width}d}-{r[-1]:0{width}d}"
                    for r in sorted(runs))
