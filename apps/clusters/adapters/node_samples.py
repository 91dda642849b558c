"""node_exporter's measures: which families each node measure reads and how, for both paths.

The PromQL (:func:`node_query`, Prometheus) and the raw-sample filter
(:func:`node_sample_wanted`, OpenMetrics files) come from the same tables, so a node
measure reads the same samples either way. Split from ``catalogue.py``, which re-exports them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from apps.clusters.adapters.promql import Matcher, counter_sum, deduplicated, selector

# Node series (node_exporter): measure -> unit. The PromQL comes from NODE_SAMPLES below
# (:func:`node_query`), so the Prometheus and the raw-sample paths read the same families
# the same way; values are per node, shared by every job there.
NODE_UNITS: dict[str, str] = {
    "cpu_busy": "ratio", "cpu_iowait": "ratio", "mem_used": "B", "net_rx": "B/s",
    "net_tx": "B/s", "ib_rx": "B/s", "ib_tx": "B/s", "ib_wait": "ticks/s", "ib_errors": "count",
    "ib_rate_min": "B/s", "ib_rate_max": "B/s", "fs_read": "B/s", "fs_write": "B/s",
}
# Network file systems: byte counters summed over a node's mounts (``fs_read``, ``fs_write``
# in B/s). node_exporter's mountstats collector by default (off unless started with
# --collector.mountstats); a site with Lustre or GPFS clients names its own counters in
# ``metric_labels`` (``"file_system": {"read": [...], "write": [...]}``).
FS_COUNTERS: dict[str, tuple[str, ...]] = {
    "fs_read": ("node_mountstats_nfs_read_bytes_total",),
    "fs_write": ("node_mountstats_nfs_write_bytes_total",),
}

# The same node measures read from raw node_exporter samples (OpenMetrics files):
# measure -> (families as written, how). ``rate``: a counter's per-second rate summed over
# devices; ``increase``: the same, summed; ``min``/``max``: a gauge over devices;
# ``busy``: 1 - the mean over CPUs of the idle counter's rate (``cpu_busy`` above);
# ``mean_rate``: the mean over CPUs of a counter's rate (``cpu_iowait``: the share of CPU
# time spent idle with disk I/O outstanding);
# ``difference``: the first family minus the second per timestamp (``mem_used``).
# A family is named by its key: the name as written, or ``name#value`` where one family
# feeds two measures through different values of its matcher label (the CPU modes).
NODE_SAMPLES: dict[str, tuple[tuple[str, ...], str]] = {
    "cpu_busy": (("node_cpu_seconds_total",), "busy"),
    "cpu_iowait": (("node_cpu_seconds_total#iowait",), "mean_rate"),
    "mem_used": (("node_memory_MemTotal_bytes", "node_memory_MemAvailable_bytes"),
                 "difference"),
    "net_rx": (("node_network_receive_bytes_total",), "rate"),
    "net_tx": (("node_network_transmit_bytes_total",), "rate"),
    "ib_rx": (("node_infiniband_port_data_received_bytes_total",), "rate"),
    "ib_tx": (("node_infiniband_port_data_transmitted_bytes_total",), "rate"),
    "ib_wait": (("node_infiniband_port_transmit_wait_total",), "rate"),
    "ib_errors": (("node_infiniband_link_error_recovery_total",
                   "node_infiniband_link_downed_total"), "increase"),
    "ib_rate_min": (("node_infiniband_rate_bytes_per_second",), "min"),
    "ib_rate_max": (("node_infiniband_rate_bytes_per_second",), "max"),
}
# The label matchers of the node measures (both paths): family key -> (label, "=" or "!=",
# value). Only idle CPU time counts for ``busy``, only iowait time for ``cpu_iowait``; the
# loopback device is not traffic.
NODE_SAMPLE_MATCHERS: dict[str, tuple[str, str, str]] = {
    "node_cpu_seconds_total": ("mode", "=", "idle"),
    "node_cpu_seconds_total#iowait": ("mode", "=", "iowait"),
    "node_network_receive_bytes_total": ("device", "!=", "lo"),
    "node_network_transmit_bytes_total": ("device", "!=", "lo"),
}


def family_name(key: str) -> str:
    """The metric name of a family key (``name`` or ``name#value``)."""
    return key.partition("#")[0]


def node_query(how: str, families: Sequence[str], node: str, sel: Sequence[Matcher],
               window: str | float, store: str = "prometheus") -> str:
    """The PromQL of one node measure over the matchers ``sel``, grouped by ``node``.

    ``families`` are family keys (NODE_SAMPLE_MATCHERS). Counters (``rate``, ``increase``,
    ``busy``, ``mean_rate``) go through ``promql.counter_sum``: one
    selector per name (rate() drops the name, and the received and transmitted series
    of a port share every other label), a target scraped twice counted once.
    ``window`` in seconds is read as Prometheus reads it, on ``store``
    (``promql.counter_call``).
    """
    def matchers(family: str) -> list[Matcher]:
        rule = NODE_SAMPLE_MATCHERS.get(family)
        return [*sel, Matcher.from_tuple(rule)] if rule else list(sel)

    if how in ("rate", "increase"):
        if len({tuple(matchers(f)) for f in families}) != 1:
            raise ValueError("the families of one measure must share their matchers")
        return counter_sum([family_name(f) for f in families], matchers(families[0]), window,
                           [node], fn=how, store=store)
    if how in ("busy", "mean_rate"):
        (family,) = families
        per_cpu = counter_sum([family_name(family)], matchers(family), window, [node, "cpu"],
                              store=store)
        mean = f"avg by ({node}) ({per_cpu})"
        return f"1 - {mean}" if how == "busy" else mean
    if how == "difference":
        total, available = families
        return (f"max by ({node}) "
                f"({deduplicated(selector(family_name(total), *matchers(total)))} - "
                f"{deduplicated(selector(family_name(available), *matchers(available)))})")
    if how in ("min", "max"):
        (family,) = families
        return f"{how} by ({node}) ({selector(family_name(family), *matchers(family))})"
    raise ValueError(f"unknown node measure kind {how!r}")


def node_sample_wanted(family: str, labels: Mapping[str, str]) -> bool:
    """Whether a raw node_exporter sample enters the measure of the family key ``family``."""
    matcher = NODE_SAMPLE_MATCHERS.get(family)
    if matcher is None:
        return True
    label, op, value = matcher
    return (labels.get(label, "") == value) is (op == "=")
