"""Slurm host lists (``rack[1-2]-node[01-02],login1``), both ways, for the app and the simulator.

``expand`` reads what ``scontrol show hostnames`` reads; ``compress`` writes what ``scontrol show
hostlistsorted`` writes for the same names without duplicates. ``expand_ranges`` and
``compress_ranges`` do the same for bare index lists (``0-2,5``: GPU indices in ``IDX:``).

Grammar, checked against the real ``scontrol`` of Slurm 22.05, 24.11 and 26.05 (the recorded
outputs are in ``tests/analysis/test_hostlist.py``):

- items are separated by commas or whitespace outside brackets; empty items are skipped;
- an item is text and bracket groups in any order: ``gpu[01-02]-ib``, ``[1-2]b``; several groups
  make the cartesian product with the leftmost group varying slowest, as Slurm prints it
  (``rack[1-2]-node[01-02]`` = rack1-node01, rack1-node02, rack2-node01, rack2-node02). Text
  after a bracket is 24.11's grammar: 22.05 refuses ``gpu[01-02]-ib``, 24.11 and later read it;
- inside brackets: comma-separated ``N`` or ``LO-HI`` (decimal, LO <= HI, no whitespace); the
  width of LO is kept for the whole range (``[08-10]`` = 08, 09, 10; ``[1-010]`` = 1 .. 10);
- there is no step syntax (``[1-9/2]``), no ``@group`` and no set operators: Slurm has none, and
  a record that contained one should be refused, not interpreted;
- duplicates are kept, in order, as ``scontrol show hostnames`` keeps them (``a1,a1`` = a1, a1):
  a host list can name a node twice (one line per task, say) and callers zip it against other
  per-node lists. ``compress`` removes them, like Slurm's ``hostlist_uniq``.

Where Slurm is lenient about a broken list we refuse it with ``HostlistError``: ``a[1-]`` (Slurm
reads a1), a stray ``]`` (Slurm keeps ``a1-2]`` as a name), nested brackets, whitespace inside a
bracket. Slurm never writes those; a record holding one is damaged. The bound is on the whole
expansion (``MAX_NAMES``), checked before anything is built, so a hostile string cannot exhaust
memory; Slurm's own bound is 65,536 per range (``Too many hosts in range``).

``compress`` folds only a name's trailing number, as Slurm does (``rack1-node[01-02],rack2-node01``;
``gpu01-ib,gpu02-ib`` stays as it is), so Slurm 22.05 can read everything it writes back. It
sorts as Slurm sorts: prefixes in natural order (rack2 before rack10), a bare name before the
numbered names of the same prefix, and keeps zero padding (``gpu[098-100]``). Names whose padding
differs under one prefix (``n8``, ``n08``) go in separate runs; there Slurm's order depends on the
input order, ours does not, and both expand to the same names.

Why our own code and not ClusterShell's NodeSet (LGPL-2.1+, a licence that would fit, since we
would only import it): NodeSet is a different grammar. It folds on every number of a name
(``gpu[01-03]-ib``, which Slurm 22.05 refuses to read back), reads step ranges, set operators and
``@group`` names resolved from its configuration files (I/O in a pure module), sorts and
de-duplicates on reading (Slurm keeps order and duplicates, and GPU bindings pair the i-th node
with the i-th ``gres_detail``), and has no bound on expansion. Matching ``scontrol`` takes some
130 lines of code, typed and tested here.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator

MAX_NAMES = 1_000_000  # one expansion; the largest GPU clusters have a few tens of thousands
_MAX_DIGITS = 18  # Slurm keeps numbers in an unsigned long; longer is not a node number
_SHOWN = 80  # characters of a bad spec quoted in an error message

_TOKEN = re.compile(r"(?P<sep>[\s,]+)|(?P<text>[^\s,\[\]]+)|\[(?P<group>[^\[\]]*)\]|(?P<bad>.)",
                    re.DOTALL)
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
_NUMBERED = re.compile(rf"(.*?)(\d{{1,{_MAX_DIGITS}}})", re.DOTALL)
_FORBIDDEN = re.compile(r"[\s,\[\]]")

Range = tuple[int, int, int]  # lo, hi, width of lo as written
Segment = str | tuple[Range, ...]  # literal text, or a bracket group's ranges


class HostlistError(ValueError):
    """A host list (or a node name) that Slurm's grammar cannot express."""


# --- Reading ---------------------------------------------------------------------------------


def expand(spec: str) -> list[str]:
    """Every name of a host list, in Slurm's order, duplicates kept. ``""`` gives ``[]``."""
    names: list[str] = []
    for item in _items(spec):
        if len(names) + _count(item) > MAX_NAMES:
            raise _error(spec, f"more than {MAX_NAMES:,} names")
        names.extend(_names(item))
    return names


def count(spec: str) -> int:
    """How many names ``expand(spec)`` gives, without building them; raises as it would."""
    total = 0
    for item in _items(spec):
        total += _count(item)
        if total > MAX_NAMES:
            raise _error(spec, f"more than {MAX_NAMES:,} names")
    return total


def expand_ranges(spec: str) -> list[int]:
    """``"0-2,5"`` to ``[0, 1, 2, 5]`` (GPU indices), the grammar inside brackets. ``""``: []."""
    if not spec.strip():
        return []
    try:
        ranges = _ranges(spec.strip())
    except HostlistError as exc:
        raise _error(spec, str(exc)) from None
    if sum(hi - lo + 1 for lo, hi, _ in ranges) > MAX_NAMES:
        raise _error(spec, f"more than {MAX_NAMES:,} values")
    return [value for lo, hi, _ in ranges for value in range(lo, hi + 1)]


def _items(spec: str) -> Iterator[list[Segment]]:
    """Each item of the list as its segments, lazily: a huge spec fails at the bound, not after."""
    item: list[Segment] = []
    for match in _TOKEN.finditer(spec):
        kind = match.lastgroup
        if kind == "sep":
            if item:
                yield item
            item = []
        elif kind == "text":
            item.append(match[0])
        elif kind == "group":
            try:
                item.append(_ranges(match["group"]))
            except HostlistError as exc:
                raise _error(spec, str(exc)) from None
        else:
            raise _error(spec, _bracket_problem(spec, match.start()))
    if item:
        yield item


def _bracket_problem(spec: str, at: int) -> str:
    if spec[at] == "]":
        return f"']' without '[' at {at}"
    closing = spec.find("]", at)
    if closing == -1:
        return f"'[' at {at} is never closed"
    return f"'[' inside brackets at {spec.find('[', at + 1)}"


def _ranges(text: str) -> tuple[Range, ...]:
    """``01-03,7`` to ``((1, 3, 2), (7, 7, 1))``: Slurm pads a range to the width of its LO."""
    out = []
    for part in text.split(","):
        match = _RANGE.fullmatch(part)
        if not match:
            raise HostlistError(f"bad range {part!r} (want N or LO-HI)")
        first, last = match[1], match[2] or match[1]
        if max(len(first), len(last)) > _MAX_DIGITS:
            raise HostlistError(f"number too long in {part!r}")
        lo, hi = int(first), int(last)
        if hi < lo:
            raise HostlistError(f"bad range {part!r}: it ends before it starts")
        out.append((lo, hi, len(first)))
    return tuple(out)


def _count(item: list[Segment]) -> int:
    total = 1
    for segment in item:
        if not isinstance(segment, str):
            total *= sum(hi - lo + 1 for lo, hi, _ in segment)
    return total


def _names(item: list[Segment]) -> Iterator[str]:
    """The cartesian product, leftmost group slowest (``itertools.product``'s order)."""
    choices = [[segment] if isinstance(segment, str) else
               [str(v).zfill(width) for lo, hi, width in segment for v in range(lo, hi + 1)]
               for segment in item]
    return ("".join(parts) for parts in itertools.product(*choices))


def _error(spec: str, reason: str) -> HostlistError:
    shown = spec if len(spec) <= _SHOWN else spec[:_SHOWN] + "..."
    return HostlistError(f"bad host list {shown!r}: {reason}")


# --- Writing ---------------------------------------------------------------------------------


def compress(names: Iterable[str]) -> str:
    """Node names to Slurm's bracket form, sorted, without duplicates (``scontrol show
    hostlistsorted`` of the unique names): ``expand(compress(x)) == sorted-unique x``."""
    plain: set[str] = set()
    numbered: dict[str, set[str]] = {}
    for name in names:
        if not name or _FORBIDDEN.search(name):
            raise HostlistError(f"{name!r} cannot be a node name in a host list")
        match = _NUMBERED.fullmatch(name)
        if match:
            numbered.setdefault(match[1], set()).add(match[2])
        else:
            plain.add(name)
    entries = [(_natural(name), 0, name) for name in plain]
    entries += [(_natural(prefix), 1, _fold(prefix, digits)) for prefix, digits in numbered.items()]
    return ",".join(text for _, _, text in sorted(entries))


def compress_ranges(values: Iterable[int]) -> str:
    """``[5, 0, 1, 2]`` to ``"0-2,5"``, sorted, without duplicates (``IDX:`` of ``gres_detail``)."""
    return ",".join(_runs(sorted(set(values)), 0))


def _fold(prefix: str, digits: set[str]) -> str:
    """One prefix's numbers: ``gpu`` + {01, 02, 05} to ``gpu[01-02,05]``; one name stays bare."""
    if len(digits) == 1:
        return prefix + next(iter(digits))
    classes = _padding_classes(digits)
    runs = [run for width in sorted(classes) for run in _runs(sorted(classes[width]), width)]
    return f"{prefix}[{','.join(runs)}]"


def _padding_classes(digits: set[str]) -> dict[int, list[int]]:
    """Numbers by the width they are printed at: 0 for unpadded, N for zero-padded to N.

    ``099`` can only be printed at width 3. ``100`` fits width 3 as well as no padding, and must
    join the padded ones, or ``gpu[098-100]`` would come back as ``gpu[100,098-099]``: an unpadded
    number goes with the widest padding it fits (no longer than itself), if there is one.
    """
    widths = sorted({len(d) for d in digits if len(d) > 1 and d[0] == "0"})
    classes: dict[int, list[int]] = {}
    for d in digits:
        padded = len(d) > 1 and d[0] == "0"
        width = len(d) if padded else max((w for w in widths if w <= len(d)), default=0)
        classes.setdefault(width, []).append(int(d))
    return classes


def _runs(values: list[int], width: int) -> list[str]:
    """Sorted unique values to ``["01-03", "07"]`` (consecutive ones as LO-HI), zero-padded."""
    out = []
    for _, run in itertools.groupby(enumerate(values), key=lambda pair: pair[1] - pair[0]):
        nums = [value for _, value in run]
        lo, hi = str(nums[0]).zfill(width), str(nums[-1]).zfill(width)
        out.append(lo if len(nums) == 1 else f"{lo}-{hi}")
    return out


_CHUNK = re.compile(r"(\d+)|(\D)")


def _natural(text: str) -> tuple[tuple[int, int, str], ...]:
    """A sort key in Slurm's order (``strnatcmp``): digit runs by value, other characters by code.

    Digit runs compare as text of their significant digits (no ``int``: a name can be long).
    """
    key = []
    for number, char in _CHUNK.findall(text):
        if number:
            value = number.lstrip("0")
            key.append((ord("0"), len(value), value))
        else:
            key.append((ord(char), 0, ""))
    return tuple(key)
