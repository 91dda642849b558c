"""Every Slurm JSON dialect Beacon reads: one row per data_parser version, and how a
document says which one it is.

Slurm prints JSON (``sacct/squeue/sinfo --json``, slurmrestd) through a *data parser* whose
version names the document's shape: 22.05 prints v0.0.38 (v0.0.37 over REST too), 23.02
v0.0.39, ... 26.05 v0.0.45. slurmrestd serves the newest three or four at once.

**Adding a version (v0.0.46, say) is one row in ``DATA_PARSERS`` below**, plus recordings of
the release's real output in ``tests/fixtures/slurm/<release>/`` that the parser tests read
(``tests/clusters/test_slurm_versions.py`` runs every recording through every parser). The
readers (``values``, ``parse``, ``parse_cluster``, ``parse_gpus``) accept each field's every
known shape (a number plain or ``{"set", "infinite", "number"}``, a state as a string or a
list of flags, an exit code as a wait status or an object, ``job_resources`` old and new),
so a row only says what a record's shape cannot show:

- ``start_is_eligible``: the version's ``time.start`` is really the eligible time (22.05's
  dbv0.0.37), so the start is rebuilt from ``elapsed``;
- ``exit_trusted``: whether a finished job's ``exit_code`` can be believed. 22.05's JSON says
  ``SUCCESS``/0 for a job that exited 3, so those records ask another source
  (``SlurmClient.exit_codes``); v0.0.39 and later decode the wait status correctly;
- ``rest``: slurmrestd serves it as ``/slurm/<name>/`` and ``/slurmdb/<name>/``, with what
  that version's endpoints can do (``RestFeatures``).

A document names its version in ``meta`` (``detect``); a name Beacon does not know is an
``UnknownDataParser`` naming it, never a silent empty or half-read result.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from apps.core.errors import AdapterError


@dataclass(frozen=True)
class RestFeatures:
    """What slurmrestd can do at one version, beyond reading jobs, nodes and partitions."""

    window_states: tuple[str, ...] = ()  # the ``state`` filter keeping never-eligible jobs
    # how a list goes in a query: 22.05 reads "a,b"; from 23.02 a comma is "Unable to parse
    # query" (HTTP 400; 500 on 26.05) and the key is repeated instead (step=1&step=2)
    repeat_lists: bool = True
    shares: bool = False  # ``GET /slurm/<v>/shares`` (sshare), Slurm 24.05+
    limits_write: bool = False  # ``POST /slurmdb/<v>/associations`` updates only what it names
    job_scripts: bool = False  # slurmdbd job records carry ``script`` (AccountingStoreFlags)


@dataclass(frozen=True)
class DataParser:
    """One data_parser version: its name, the releases that print it, and its quirks."""

    name: str
    releases: tuple[str, ...]  # Slurm releases that print or serve it
    tested: str  # against what Beacon's tests run it (docs/slurm.md's table)
    start_is_eligible: bool = False
    exit_trusted: bool = True
    rest: RestFeatures | None = None  # None: Beacon does not use it over REST

    @property
    def number(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.name[1:].split("."))


# Filter for a window query that includes jobs that never became eligible (held, then
# cancelled), as ``sacct -s`` does; "requeued" does not parse in 22.05.
_STATES_38 = ("pending", "running", "suspended", "completed", "cancelled", "failed", "timeout",
              "node_fail", "preempted", "boot_fail", "deadline", "out_of_memory")
_MODERN = RestFeatures(window_states=_STATES_38, shares=True, limits_write=True,
                       job_scripts=True)

DATA_PARSERS: dict[str, DataParser] = {p.name: p for p in (
    DataParser("v0.0.37", ("21.08", "22.05"), "real 22.05 daemons (REST)",
               start_is_eligible=True, exit_trusted=False,
               rest=RestFeatures(repeat_lists=False)),
    DataParser("v0.0.38", ("22.05",), "real 22.05 daemons (CLI and REST)", exit_trusted=False,
               rest=RestFeatures(window_states=_STATES_38, repeat_lists=False)),
    DataParser("v0.0.39", ("23.02", "23.11"), "not run here (no 23.02 packaged)",
               rest=RestFeatures(window_states=_STATES_38)),
    DataParser("v0.0.40", ("23.11", "24.05", "24.11"), "real 24.11 daemons (REST)",
               rest=RestFeatures(window_states=_STATES_38, limits_write=True,
                                 job_scripts=True)),
    DataParser("v0.0.41", ("24.05", "24.11", "25.05"), "real 24.11 daemons (REST)",
               rest=_MODERN),
    DataParser("v0.0.42", ("24.11", "25.05", "25.11", "26.05"),
               "real 24.11 (CLI and REST) and 26.05 daemons (REST)", rest=_MODERN),
    DataParser("v0.0.43", ("25.05", "25.11", "26.05"), "real 26.05 daemons (REST)",
               rest=_MODERN),
    DataParser("v0.0.44", ("25.11", "26.05"), "real 26.05 daemons (REST)", rest=_MODERN),
    DataParser("v0.0.45", ("26.05",), "real 26.05 daemons (CLI and REST)", rest=_MODERN),
)}

# What each release's own commands print (its newest data parser): for documents that name
# their release but not their parser.
RELEASE_DEFAULT = {"21.08": "v0.0.37", "22.05": "v0.0.38", "23.02": "v0.0.39",
                   "23.11": "v0.0.40", "24.05": "v0.0.41", "24.11": "v0.0.42",
                   "25.05": "v0.0.43", "25.11": "v0.0.44", "26.05": "v0.0.45"}

_NAME = re.compile(r"v\d+\.\d+\.\d+")


class UnknownDataParser(AdapterError):
    """A document in a Slurm JSON dialect Beacon does not read (or that names none)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, service="slurm")


def known() -> str:
    """The versions Beacon reads, for messages: "v0.0.37 to v0.0.45"."""
    names = sorted(DATA_PARSERS.values(), key=lambda p: p.number)
    return f"{names[0].name} to {names[-1].name}"


def get(name: str) -> DataParser:
    """The row of ``name`` ("v0.0.42"; "data_parser/v0.0.42" and "0.0.42" are accepted)."""
    match = _NAME.search(name) or _NAME.search(f"v{name}")
    parser = DATA_PARSERS.get(match.group(0)) if match else None
    if parser is None:
        raise UnknownDataParser(
            f"Slurm JSON in data_parser {name!r}, which Beacon does not read (it reads "
            f"{known()}): add a row to apps/clusters/adapters/slurm/versions.py once "
            "recordings of that release pass the parser tests")
    return parser


def detect(meta: Any) -> DataParser:
    """The data parser a document's ``meta`` names.

    1. ``meta.plugin.data_parser`` (23.11+) or ``meta.plugins.data_parser`` (23.02);
    2. ``meta.plugin.type`` ``openapi/dbv0.0.38`` / ``openapi/v0.0.37`` (22.05 and older,
       where the OpenAPI plugin was the parser);
    3. the release (``meta.slurm.release``, ``meta.Slurm.release``), through what that
       release's commands print.
    Anything else is ``UnknownDataParser``, naming what the document said.
    """
    if not isinstance(meta, Mapping):
        raise UnknownDataParser("Slurm JSON without a 'meta' object: its data_parser "
                                "version is unknown (sacct/squeue --json always print one)")
    for key in ("plugin", "plugins"):
        plugin = meta.get(key)
        if isinstance(plugin, Mapping) and isinstance(plugin.get("data_parser"), str):
            return get(plugin["data_parser"])
    plugin = meta.get("plugin")
    if isinstance(plugin, Mapping) and isinstance(plugin.get("type"), str) \
            and _NAME.search(plugin["type"]):
        return get(plugin["type"])
    release = release_of(meta)
    if release:
        series = ".".join(release.split(".")[:2])
        if series in RELEASE_DEFAULT:
            return get(RELEASE_DEFAULT[series])
        raise UnknownDataParser(f"Slurm JSON from Slurm {release}, whose data_parser Beacon "
                                f"does not know (it reads {known()})")
    raise UnknownDataParser("Slurm JSON whose 'meta' names neither a data_parser nor a "
                            f"Slurm release: {str(dict(meta))[:200]}")


def release_of(meta: Any) -> str:
    """``meta.slurm.release`` ("24.11.5"; ``Slurm`` in 22.05), or "" when absent."""
    if not isinstance(meta, Mapping):
        return ""
    slurm = meta.get("slurm") or meta.get("Slurm")
    if isinstance(slurm, Mapping) and isinstance(slurm.get("release"), str):
        return str(slurm["release"])
    return ""


def newest_served(paths: Any) -> DataParser:
    """The newest version both Beacon and a slurmrestd speak, from its ``/openapi/v3``
    ``paths`` (``/slurm/v0.0.42/jobs/``, ...)."""
    served = {m.group(0) for path in paths or () if isinstance(path, str)
              and path.startswith("/slurm/") and (m := _NAME.search(path))}
    usable = [DATA_PARSERS[v] for v in served if v in DATA_PARSERS
              and DATA_PARSERS[v].rest is not None]
    if not usable:
        offered = ", ".join(sorted(served)) or "none"
        raise UnknownDataParser(f"slurmrestd offers no API version Beacon speaks (it offers "
                                f"{offered}; Beacon speaks {known()})")
    return max(usable, key=lambda p: p.number)
