"""Software component names as inventories and advisories spell them, made one name.

Node inventories and advisories name the same software in many ways: ``torch`` and
``pytorch``, ``nvidia-container-toolkit`` and ``nvidia_container_toolkit`` (and the CLI's
"NVIDIA Container Toolkit"), ``slurm-wlm`` (Debian's package) and ``slurm``. An advisory
must match all of them, so every name goes through :func:`canonical` before it is
compared: lower case, runs of ``-``, ``_``, ``.`` and spaces made one ``_``, then the alias
table (built-in :data:`ALIASES` plus the site's own ``ComponentAlias`` rows, merged by
:func:`alias_table`).

An inventory key may carry a qualifier after a colon: ``pytorch:ml/2024.1`` is PyTorch as
the site module ``ml/2024.1`` provides it (a node has several). :func:`split` returns the
canonical component and the qualifier; only the component is matched against advisories.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_SEPARATORS = re.compile(r"[\s._-]+")
MAX_NAME = 100

# Normalised alias -> canonical name. Only names that denote the very same version
# stream: nvidia-ctk and the toolkit's base package print the toolkit's version; Debian's
# slurm-wlm and slurmd print Slurm's; munged prints MUNGE's.
ALIASES: dict[str, str] = {
    "torch": "pytorch",
    "py_torch": "pytorch",
    "python_torch": "pytorch",
    "python3_torch": "pytorch",
    "nvidia_ctk": "nvidia_container_toolkit",
    "nvidia_container_toolkit_base": "nvidia_container_toolkit",
    "nvidia_container_toolkit_cli": "nvidia_container_toolkit",
    "slurm_wlm": "slurm",
    "slurmd": "slurm",
    "slurmctld": "slurm",
    "slurm_client": "slurm",
    "munged": "munge",
    "nvidia_driver_version": "nvidia_driver",
}


def normalise(name: object) -> str:
    """``name`` lower-cased with separators made single underscores ('' for non-text)."""
    if not isinstance(name, str):
        return ""
    return _SEPARATORS.sub("_", name.strip().lower()[:MAX_NAME]).strip("_")


def canonical(name: object, aliases: Mapping[str, str] | None = None) -> str:
    """The one name of a component: normalised, then looked up in the alias table
    (``aliases`` replaces the built-in table; pass ``{**ALIASES, **site}`` to extend it).
    A qualifier (``:...``) is dropped; use :func:`split` to keep it."""
    return split(name, aliases)[0]


def split(name: object, aliases: Mapping[str, str] | None = None) -> tuple[str, str]:
    """``(canonical component, qualifier)`` of an inventory key such as
    ``torch:ml/2024.1``; the qualifier is '' when there is none."""
    if not isinstance(name, str):
        return "", ""
    base, _, qualifier = name.partition(":")
    table = ALIASES if aliases is None else aliases  # keys normalised (alias_table)
    key = normalise(base)
    return normalise(table.get(key, key)), qualifier.strip()


def alias_table(site: Mapping[str, str]) -> dict[str, str]:
    """The built-in aliases with the site's on top (both sides normalised); a site row
    may redirect a built-in alias."""
    table = dict(ALIASES)
    for alias, target in site.items():
        key, value = normalise(alias), normalise(target)
        if key and value:
            table[key] = value
    return table
