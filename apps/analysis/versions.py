"""Version strings as node inventories report them, parsed and compared robustly.

Inventories print versions the way packages and tools spell them: ``22.05.8``,
``slurm-wlm 22.05.8-1+deb12u1``, ``v1.17.8``, ``1.17.8-rc.1``, ``2.6.0a0+git1234``,
``1:0.5.15-2`` (a Debian epoch), ``2.5.1+cu121``. :func:`parse_version` keeps the
release numbers and a pre-release tag (which sorts *before* its release) and drops the
rest (Debian revisions, local build tags). What it cannot read (``main-d5e5f51``, an
empty string) is ``None``: the caller records it as skipped rather than guessing.

:func:`is_vulnerable` answers "is this version affected by this advisory", where an
advisory lists one fixed version per maintained branch (Slurm fixed 22.05.11, 23.02.7
and 23.11.1 for the same CVEs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Pre-release tags, ranked below a release (rank 0).
_PRE_RANK = {"dev": -4, "a": -3, "alpha": -3, "b": -2, "beta": -2, "c": -1, "rc": -1,
             "pre": -1, "preview": -1}
# A release number starts at the beginning, after a separator or after a "v"; a letter
# just before it (``d5e5f51``, a git hash) disqualifies it.
_NUMBER = re.compile(r"(?:^|(?<=[\s=_/:@(-])|(?<=[\s=_/:@(-]v)|(?<=^v))(\d{1,9}(?:\.\d{1,9}){0,5})"
                     r"(?![\d])")
_PRE = re.compile(r"^[-._~]?(dev|alpha|beta|preview|pre|rc|a|b|c)[-._]?(\d{0,9})(?![a-z])")
_EPOCH = re.compile(r"^\d{1,4}:(?=\d)")
MAX_VERSION_TEXT = 200


@dataclass(frozen=True, order=True)
class Version:
    """A parsed version: release numbers (trailing zeros dropped) and a pre-release rank.

    ``Version`` values compare like the versions they stand for: ``2.6.0a0 < 2.6.0``,
    ``22.05 == 22.05.0``, ``23.02.10 > 23.02.7``.
    """

    key: tuple[int, ...]
    pre: tuple[int, int] = (0, 0)
    release: tuple[int, ...] = field(default=(), compare=False)
    raw: str = field(default="", compare=False)

    def __str__(self) -> str:
        return self.raw or ".".join(map(str, self.release))

    def branch(self, depth: int) -> tuple[int, ...]:
        """The first ``depth`` numbers, zero-padded (``23.02.7`` -> ``(23, 2)``)."""
        padded = self.release + (0,) * max(0, depth - len(self.release))
        return padded[:depth]


def parse_version(raw: object) -> Version | None:
    """The version in ``raw``, or None when there is none to read (never raises)."""
    if not isinstance(raw, str | int | float) or isinstance(raw, bool):
        return None
    text = str(raw).strip().lower()[:MAX_VERSION_TEXT]
    text = _EPOCH.sub("", text)
    match = _NUMBER.search(text)
    if match is None:
        return None
    release = tuple(int(part) for part in match.group(1).split("."))
    key = release
    while len(key) > 1 and key[-1] == 0:
        key = key[:-1]
    pre = _PRE.match(text[match.end():])
    rank = (_PRE_RANK[pre.group(1)], int(pre.group(2) or 0)) if pre else (0, 0)
    return Version(key, rank, release, str(raw).strip()[:MAX_VERSION_TEXT])


@dataclass(frozen=True)
class Advisory:
    """One vulnerability record: which versions of ``software`` it affects.

    ``fixed`` holds one fixed version per maintained branch; ``branch_depth`` says how
    many numbers name a branch (2: ``23.02`` of ``23.02.7``). ``affected_from`` is the
    first affected version when older ones are not (MUNGE 0.5 - 0.5.17).
    """

    software: str
    fixed: tuple[str, ...]
    cves: tuple[str, ...]
    severity: str = "high"
    affected_from: str = ""
    branch_depth: int = 2
    note: str = ""


def is_vulnerable(version: Version, advisory: Advisory) -> bool:
    """Whether ``version`` is affected by ``advisory``.

    1. Older than ``affected_from``: not affected.
    2. A fixed version on the same branch: affected when older than it.
    3. No fix on this branch but one on a newer branch: affected (an older branch, or
       one nobody patched). Newer than every fixed branch: released with the fix.
    """
    fixes = sorted(v for v in map(parse_version, advisory.fixed) if v is not None)
    first = parse_version(advisory.affected_from) if advisory.affected_from else None
    if not fixes or (first is not None and version < first):
        return False
    depth = advisory.branch_depth
    same = [fix for fix in fixes if fix.branch(depth) == version.branch(depth)]
    if same:
        return version < same[0]
    return any(fix.branch(depth) > version.branch(depth) for fix in fixes)
