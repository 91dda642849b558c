"""What every stand-in class uses: the daemons' state, pyslurm's value conversions
(utils/uint.pyx, utils/ctime.pyx, utils/helpers.pyx, utils/cstr.pyx), its multi-cluster
collection (xcollections.pyx) and its errors (core/error.pyx)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

VERSION = "25.11.2"
LOCAL_CLUSTER = "devcluster"  # pyslurm.settings.LOCAL_CLUSTER: ClusterName of slurm.conf
NO_VAL = 0xFFFFFFFE
INFINITE = 0xFFFFFFFF
UNLIMITED = "UNLIMITED"  # pyslurm/constants.py
# A TRES table as slurmdbd numbers it (ids 1-5 are Slurm's built-ins; gres ids from 1001)
TRES_TABLE = {1: ("cpu", ""), 2: ("mem", ""), 3: ("energy", ""), 4: ("node", ""),
              5: ("billing", ""), 1001: ("gres", "gpu"), 1002: ("gres", "gpu:h100"),
              1003: ("gres", "gpu:h200"), 1004: ("gres", "shard")}
STRERROR = {1800: "Unable to contact slurm controller (connect failure)",
            2002: "Access/permission denied", 2017: "Invalid job id specified",
            2021: "Job/step already completing or completed",
            7000: "Unable to connect to database"}


@dataclass
class State:
    """What the stand-in daemons hold, and what was asked of them."""

    db_jobs: list[Any] = field(default_factory=list)
    jobs: list[Any] = field(default_factory=list)
    nodes: list[Any] = field(default_factory=list)
    partitions: list[Any] = field(default_factory=list)
    associations: list[Any] = field(default_factory=list)
    diag: dict[str, int] = field(default_factory=dict)
    fail: dict[str, Exception] = field(default_factory=dict)  # call name -> raised
    kill_errno: dict[int, int] = field(default_factory=dict)  # job id -> slurm errno
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def call(self, name: str, arg: Any = None) -> None:
        self.calls.append((name, arg))
        if name in self.fail:
            raise self.fail[name]


STATE = State()


def reset() -> State:
    """Empty the daemons (in place: every stand-in module holds this one ``STATE``)."""
    STATE.__init__()  # type: ignore[misc]
    return STATE


# --- pyslurm/utils: the conversions every class uses (uint.pyx, ctime.pyx, helpers.pyx) --


def _u32_parse(value: int, noval: int = NO_VAL, zero_is_noval: bool = True) -> Any:
    if value == noval or (value == 0 and zero_is_noval):
        return None
    return UNLIMITED if value == INFINITE else value


def _raw_time(value: int, on_noval: Any = None, on_inf: Any = None) -> Any:
    if value in (NO_VAL, 0):
        return on_noval
    return on_inf if value == INFINITE else value


def _exit_code(raw: int) -> tuple[int, int]:
    """helpers.pyx ``_get_exit_code``: (code, signal) from a wait status; code >= 128 loses 128."""
    if raw == NO_VAL:
        return 0, 0
    if raw & 0x7F:
        return 0, raw & 0x7F
    code = (raw >> 8) & 0xFF
    return (code - 128 if code >= 128 else code), 0


def _key_values(text: str, delim: str = ",") -> dict[str, Any]:
    """cstr.pyx ``to_dict``: ``a=1,b=x`` (the environment: one per line, ``delim="\\n"``) to a
    dict, digit values as ints, items without '=' gone."""
    out: dict[str, Any] = {}
    for item in (text or "").split(delim):
        key, sep, value = item.partition("=")
        if sep:
            out[key] = int(value) if value.isdigit() else value
    return out


_GRES_ITEM = re.compile(r"(?:gres:)?(?P<name>[^:,(]+)(?::(?P<type>[^:,(]+))?:(?P<count>\d+)"
                        r"(?:\((?:IDX:(?P<idx>[^)]*)|[^)]*)\))?")


def gres_dict(text: str) -> dict[str, Any]:
    """cstr.pyx ``to_gres_dict``: ``gpu:h100:2(S:0),gpu:h200:4(IDX:2-5)`` to
    ``{"gpu:h100": 2, "gpu:h200": {"count": 4, "indexes": "2-5"}}`` (IDX kept as text)."""
    out: dict[str, Any] = {}
    for match in _GRES_ITEM.finditer(text or ""):
        key = f"{match['name']}:{match['type']}" if match["type"] else match["name"]
        count = int(match["count"])
        out[key] = {"count": count, "indexes": match["idx"]} if match["idx"] else count
    return out


# --- pyslurm/xcollections.pyx: MultiClusterMap ------------------------------------------


class MultiClusterMap:
    """``{cluster: {id: object}}``; iterating yields the ids (not the objects), ``values()``
    the objects of every cluster, ``get(id)`` looks in the local cluster."""

    __slots__ = ("data",)

    def __init__(self, items: list[Any] | None = None, id_attr: str = "id") -> None:
        self.data: dict[str, dict[Any, Any]] = {}
        for item in items or []:
            self.data.setdefault(item.cluster, {})[getattr(item, id_attr)] = item

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self.keys()))

    def __len__(self) -> int:
        return sum(len(d) for d in self.data.values())

    def __bool__(self) -> bool:
        return bool(self.data)

    def keys(self) -> list[Any]:
        return [key for d in self.data.values() for key in d]

    def values(self) -> list[Any]:
        return [item for d in self.data.values() for item in d.values()]

    def items(self) -> list[tuple[Any, Any]]:
        return [(key, item) for d in self.data.values() for key, item in d.items()]

    def get(self, key: Any, default: Any = None) -> Any:
        cluster, key = key if isinstance(key, tuple) else (LOCAL_CLUSTER, key)
        return self.data.get(cluster, {}).get(key, default)

    def to_dict(self, multi_cluster: bool = False, recursive: bool = False) -> dict[Any, Any]:
        data = {c: {k: v.to_dict() for k, v in d.items()} for c, d in self.data.items()}
        return data if multi_cluster else data.get(LOCAL_CLUSTER, {})


def _public(obj: Any) -> dict[str, Any]:
    """helpers.pyx ``instance_to_dict``: every public, non-callable attribute."""
    names = (n for n in dir(obj) if not n.startswith("_"))
    return {n: getattr(obj, n) for n in names if not callable(getattr(obj, n))}


# --- pyslurm/core/error.pyx --------------------------------------------------------------


class PyslurmError(Exception):
    pass


class RPCError(PyslurmError):
    """``RPCError(errno=SLURM_ERROR, msg=None)``: ``errno`` and ``msg``; without a message,
    Slurm's text for the errno."""

    def __init__(self, errno: int = -1, msg: str | None = None) -> None:
        self.errno = errno
        self.msg = msg or STRERROR.get(errno, "Unspecified error")
        super().__init__(self.msg)
