"""The simulated telemetry split over the cluster's stores, for ``make demo-full`` (issue 29).

The simulator writes one OpenMetrics file per 6-hour window holding every node, as one
Prometheus scraping the whole cluster would. A site with several stores has each store
scrape its own nodes only, so demo-full fills each store with its own nodes' samples:
:func:`split_telemetry` copies every file into one folder per store, each sample line to
the store that answers for its series' node. The routing is Beacon's own
(``clusters.stores``: host globs, then partitions, else the cluster's own Prometheus, the
``default`` store) and so is the node of a series (``Catalogue.series_host``), so a store
holds exactly what the readers will ask it for. The family headers (HELP, TYPE) go to every
folder and each part ends with ``# EOF``: each file is valid OpenMetrics by itself, for
promtool or VictoriaMetrics' import API.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from apps.analysis.stores import DEFAULT
from apps.analysis.timeseries import Series
from apps.clusters import stores as cluster_stores
from apps.clusters.adapters.catalogue import Catalogue
from apps.clusters.models import Cluster
from apps.core.errors import AdapterError
from apps.jobs.adapters.openmetrics import OpenMetricsError, series_of
from apps.jobs.archive_sources import catalogue_for


@dataclass
class Part:
    """What one store's folder got: its nodes, sample lines and files."""

    folder: Path
    nodes: set[str] = field(default_factory=set)
    samples: int = 0
    files: int = 0


def split_telemetry(cluster: Cluster, source: Path, out: Path) -> dict[str, Part]:
    """Split ``source``'s ``*.om`` files into ``out/<store>/`` by the store answering for
    each series' node; returns each store's part (every store, even one that got nothing).

    Idempotent: a store's folder is emptied of ``*.om`` files first. A series without a
    node goes where Beacon would look for it, the default store.
    """
    files = sorted(source.glob("*.om"))
    if not files:
        raise AdapterError(f"no *.om telemetry files in {source}", service="openmetrics")
    catalogue = catalogue_for(cluster)
    stores = cluster_stores.stores_for(cluster, catalogue)
    names = sorted({s.name for s in stores.routes} | {DEFAULT})
    parts = {name: Part(out / name) for name in names}
    for part in parts.values():
        part.folder.mkdir(parents=True, exist_ok=True)
        for old in part.folder.glob("*.om"):
            old.unlink()
    for path in files:
        _split_file(path, parts, stores.store_of, catalogue)
    return parts


def _split_file(path: Path, parts: dict[str, Part], store_of: Callable[[str], str],
                catalogue: Catalogue) -> None:
    """One window's file into each part's folder under the same name."""
    outs = {name: (part.folder / path.name).open("w", encoding="utf-8")
            for name, part in parts.items()}
    try:
        with path.open(encoding="utf-8") as lines:
            _route_lines(lines, outs, parts, store_of, catalogue)
    except OpenMetricsError as exc:
        raise OpenMetricsError(f"{path}: {exc}", service="openmetrics") from exc
    finally:
        for handle in outs.values():
            handle.close()
    for part in parts.values():
        part.files += 1


def _route_lines(lines: Iterable[str], outs: Mapping[str, IO[str]], parts: dict[str, Part],
                 store_of: Callable[[str], str], catalogue: Catalogue) -> None:
    """Comments to every output, each sample line to its store's. A series' text repeats
    on each of its samples: it is parsed and routed once per file (memory stays at one
    file's series)."""
    known: dict[str, str] = {}  # series text -> store name
    number = 0
    for number, line in enumerate(lines, start=1):
        if line.startswith("#"):
            for handle in outs.values():
                handle.write(line)
            if line.rstrip("\n") == "# EOF":
                return
            continue
        if not line.strip():
            continue
        text = _series_text(line, number)
        name = known.get(text)
        if name is None:
            metric, labels = series_of(text, number)
            host = catalogue.series_host(Series(metric, labels))
            name = known[text] = store_of(host)
            if host:
                parts[name].nodes.add(host)
        outs[name].write(line)
        parts[name].samples += 1
    raise OpenMetricsError(f"no '# EOF' after line {number}: truncated file?",
                           service="openmetrics")


def _series_text(line: str, number: int) -> str:
    """``name{labels}`` of a ``name{labels} value timestamp`` line (the simulator's shape;
    promtool and the import API want the timestamp, and exemplars are not split)."""
    parts = line.rstrip("\n").rsplit(" ", 2)
    if len(parts) != 3 or " # " in line:
        raise OpenMetricsError(f"line {number}: expected 'name{{labels}} value timestamp' "
                               f"without an exemplar: {line[:200]!r}", service="openmetrics")
    return parts[0]
