"""Real exporters for integration tests, scraped by a real Prometheus (issue 17).

- :class:`SyntheticNode`: a ``/sys`` and ``/proc`` tree that Debian's node_exporter reads
  (``deploy/dev/node-exporter.sh`` with ``--path.sysfs``/``--path.procfs``): InfiniBand
  devices and ports with every counter file node_exporter 1.5 reads, both directions; a
  network interface (``/proc/net/dev``), CPUs (``/proc/stat``) and memory. Counters grow
  at rates the test sets and can be reset; every file is replaced atomically.
- :class:`DcgmEndpoint`: a ``/metrics`` HTTP server in dcgm-exporter 4.x's exact text
  (names, ``# HELP``/``# TYPE``, label order ``gpu, UUID, pci_bus_id, device, modelName,
  [GPU_I_PROFILE, GPU_I_ID], Hostname, DCGM_FI_DRIVER_VERSION, [hpc_job]``), with the
  ``hpc_job`` label appearing and disappearing as the test starts and ends jobs.
- :class:`AmdEndpoint`: AMD's Device Metrics Exporter's ``/metrics`` (lower-case gauges,
  ``gpu_id``/``hostname``/``serial_number``/``card_model`` labels, its Slurm integration's
  ``job_id``/``job_user``/``job_partition``, ``gpu_clock`` per clock, XGMI kilobytes per
  link growing with time, an optional site prefix), for the AMD Instinct tests (issue 28).
- :func:`scraped_site`: node_exporters and dcgm endpoints scraped for a while by the same
  private Prometheus, whose URL and time span a test's jobs are then read from.
- :func:`scraping_prometheus`: a private Prometheus (``deploy/dev/prometheus.sh`` with a
  generated ``PROM_CONFIG``) on a free loopback port that scrapes them every second, with
  the site's rules loaded; ``instance`` is relabelled to ``<host>:<port>`` as sites do.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests
import yaml

from tests.integration.services import require

ROOT = Path(__file__).resolve().parents[2]
NODE_SCRIPT = ROOT / "deploy" / "dev" / "node-exporter.sh"
PROM_SCRIPT = ROOT / "deploy" / "dev" / "prometheus.sh"
VM_SCRIPT = ROOT / "deploy" / "dev" / "victoria-metrics.sh"
RULES = ROOT / "deploy" / "prometheus" / "rules"
USER_HZ = 100  # /proc/stat ticks per second, as node_exporter assumes

# Every file under ports/<n>/counters that node_exporter 1.5 (procfs 0.8) reads.
IB_COUNTERS = (
    "excessive_buffer_overrun_errors", "link_downed", "link_error_recovery",
    "local_link_integrity_errors", "multicast_rcv_packets", "multicast_xmit_packets",
    "port_rcv_constraint_errors", "port_rcv_data", "port_rcv_discards", "port_rcv_errors",
    "port_rcv_packets", "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
    "port_xmit_constraint_errors", "port_xmit_data", "port_xmit_discards",
    "port_xmit_packets", "port_xmit_wait", "symbol_error", "unicast_rcv_packets",
    "unicast_xmit_packets", "VL15_dropped",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _write(path: Path, text: str) -> None:
    """Replace ``path`` atomically: the exporter never reads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@dataclass
class SyntheticNode:
    """One node's synthetic ``sys`` and ``proc`` trees under ``root``.

    ``ib_bps[(device, port)] = (rx, tx)`` bytes per second; ``cpu_busy`` the share of each
    of ``cores`` CPUs busy in user mode and ``cpu_iowait`` in I/O wait (the rest idle);
    ``net_bps = (rx, tx)`` on ``eth0``. :meth:`tick` advances every counter by the time since
    the last tick at the current rates.
    """

    root: Path
    devices: tuple[str, ...] = ("mlx5_0", "mlx5_1")
    ports: tuple[str, ...] = ("1", "2")
    cores: int = 4
    ib_bps: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    cpu_busy: float = 0.25
    cpu_iowait: float = 0.0
    net_bps: tuple[float, float] = (1e6, 2e6)
    mem: tuple[int, int] = (256 << 30, 200 << 30)  # total, available (bytes)
    counters: dict[tuple[str, str, str], float] = field(default_factory=dict)
    cpu: list[list[float]] = field(default_factory=list)  # per core: user, idle, iowait ticks
    net: list[float] = field(default_factory=lambda: [0.0, 0.0])
    last: float | None = None

    @property
    def sysfs(self) -> Path:
        return self.root / "sys"

    @property
    def procfs(self) -> Path:
        return self.root / "proc"

    def create(self) -> None:
        for device in self.devices:
            base = self.sysfs / "class" / "infiniband" / device
            for name, value in (("board_id", "MT_0000000223"), ("fw_ver", "28.39.1002"),
                                ("hca_type", "MT4129")):
                _write(base / name, value + "\n")
            for port in self.ports:
                _write(base / "ports" / port / "state", "4: ACTIVE\n")
                _write(base / "ports" / port / "phys_state", "5: LinkUp\n")
                _write(base / "ports" / port / "rate", "400 Gb/sec (4X NDR)\n")
                for counter in IB_COUNTERS:
                    self.counters[(device, port, counter)] = 0.0
        self.cpu = [[0.0, 0.0, 0.0] for _ in range(self.cores)]
        self.last = time.time()
        self._flush()

    def bump(self, device: str, port: str, counter: str, by: float) -> None:
        """Add ``by`` to one counter now (an error burst)."""
        self.counters[(device, port, counter)] += by
        self._flush()

    def reset(self, device: str, port: str, counter: str, value: float = 0.0) -> None:
        """A counter restarts (driver reload, HCA reset): a smaller value than before."""
        self.counters[(device, port, counter)] = value
        self._flush()

    def tick(self) -> None:
        now = time.time()
        dt = now - (self.last or now)
        self.last = now
        for (device, port), (rx, tx) in self.ib_bps.items():
            # port_rcv_data / port_xmit_data count 4-byte words; node_exporter multiplies by 4
            self.counters[(device, port, "port_rcv_data")] += rx * dt / 4
            self.counters[(device, port, "port_xmit_data")] += tx * dt / 4
            self.counters[(device, port, "port_rcv_packets")] += rx * dt / 4096
            self.counters[(device, port, "port_xmit_packets")] += tx * dt / 4096
        for core in self.cpu:
            core[0] += self.cpu_busy * dt * USER_HZ
            core[1] += (1 - self.cpu_busy - self.cpu_iowait) * dt * USER_HZ
            core[2] += self.cpu_iowait * dt * USER_HZ
        self.net[0] += self.net_bps[0] * dt
        self.net[1] += self.net_bps[1] * dt
        self._flush()

    def _flush(self) -> None:
        for (device, port, counter), value in self.counters.items():
            path = self.sysfs / "class" / "infiniband" / device / "ports" / port / "counters"
            _write(path / counter, f"{int(value)}\n")
        self._flush_proc()

    def _flush_proc(self) -> None:
        # /proc/stat: user nice system idle iowait irq softirq steal guest guest_nice
        total = [sum(c[k] for c in self.cpu) for k in range(3)]
        lines = [f"cpu  {int(total[0])} 0 0 {int(total[1])} {int(total[2])} 0 0 0 0 0"]
        lines += [f"cpu{i} {int(u)} 0 0 {int(idle)} {int(iowait)} 0 0 0 0 0"
                  for i, (u, idle, iowait) in enumerate(self.cpu)]
        lines += ["intr 0", "ctxt 0", "btime 1790000000", "processes 1", "procs_running 1",
                  "procs_blocked 0", "softirq 0 0 0 0 0 0 0 0 0 0 0"]
        _write(self.procfs / "stat", "\n".join(lines) + "\n")
        rx, tx = (int(v) for v in self.net)
        _write(self.procfs / "net" / "dev", (
            "Inter-|   Receive                                                |  Transmit\n"
            " face |bytes    packets errs drop fifo frame compressed multicast|bytes    "
            "packets errs drop fifo colls carrier compressed\n"
            f"    lo: {rx} {rx // 1500} 0 0 0 0 0 0 {rx} {rx // 1500} 0 0 0 0 0 0\n"
            f"  eth0: {rx} {rx // 1500} 0 0 0 0 0 0 {tx} {tx // 1500} 0 0 0 0 0 0\n"))
        total_kb, available_kb = self.mem[0] >> 10, self.mem[1] >> 10
        _write(self.procfs / "meminfo", f"MemTotal:       {total_kb} kB\n"
                                        f"MemFree:        {available_kb} kB\n"
                                        f"MemAvailable:   {available_kb} kB\n")


@contextmanager
def node_exporter(node: SyntheticNode, run_dir: Path) -> Iterator[int]:
    """Debian's node_exporter on a free loopback port over ``node``'s trees."""
    port = free_port()
    env = {**os.environ, "NODE_EXPORTER_PORT": str(port), "NODE_EXPORTER_SYSFS": str(node.sysfs),
           "NODE_EXPORTER_PROCFS": str(node.procfs), "NODE_EXPORTER_DIR": str(run_dir)}
    done = subprocess.run([str(NODE_SCRIPT), "up"], env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    require(done.returncode == 0 or "missing" not in done.stderr, "node_exporter",
            f"{NODE_SCRIPT.relative_to(ROOT)} up (as root it installs the Debian package)")
    assert done.returncode == 0, done.stderr or done.stdout
    try:
        yield port
    finally:
        subprocess.run([str(NODE_SCRIPT), "down"], env=env, capture_output=True, timeout=60,
                       check=False)


# --- dcgm-exporter ---------------------------------------------------------------------

# (name, type, help) as dcgm-exporter's default-counters.csv and Beacon's collectors file
DCGM_FIELDS = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
     "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge",
     "The ratio of cycles an SM has at least 1 warp assigned."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge",
     "Ratio of cycles the tensor (HMMA) pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
     "Ratio of cycles the device memory interface is active sending or receiving data."),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over the PCIe bus - "
                                            "including both protocol headers and data payloads"
                                            " - in bytes per second."),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus - "
                                            "including both protocol headers and data payloads"
                                            " - in bytes per second."),
    # Beacon's collectors file (deploy/prometheus/dcgm-collectors.csv) adds these
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "Current clock event (throttle) reasons "
                                                  "bitmask."),
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge", "The rate of data transmitted over NVLink "
                                              "(bytes/s)."),
    ("DCGM_FI_PROF_NVLINK_RX_BYTES", "gauge", "The rate of data received over NVLink "
                                              "(bytes/s)."),
    # the FP pipes (the roofline, issue 30): written only for a GPU that sets them
    ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "gauge", "Ratio of cycles the fp64 pipes are active."),
    ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "gauge", "Ratio of cycles the fp32 pipes are active."),
    ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge", "Ratio of cycles the fp16 pipes are active."),
)
DRIVER = "550.54.15"
MODEL = "NVIDIA H100 80GB HBM3"


@dataclass
class Gpu:
    """One GPU (or MIG instance, with ``mig=(profile, id)``) and what it reports now."""

    index: int
    uuid: str
    util: float = 0.0
    fb_used: float = 0.0
    power: float = 70.0
    tensor: float = 0.0
    jobs: list[str] = field(default_factory=list)  # hpc_job labels: one copy per job
    mig: tuple[str, str] | None = None
    energy: float = 0.0
    # Set to override what follows from ``util``: SM activity (a GPU busy waiting in NCCL is
    # busy by utilisation with its SMs idle), PCIe receive, SM clock, temperature; NVLink
    # bytes/s each way; the clock-event (throttle) reasons bitmask.
    sm_active: float | None = None
    pcie_rx: float | None = None
    sm_clock: float | None = None
    temp: float | None = None
    nvlink: float = 0.0
    throttle: int = 0
    # The FP pipes' activities (None: not written); ``profiling`` False: no DCGM_FI_PROF_*
    # field at all (DCGM's profiling module off, or a GPU it does not support)
    pipes: dict[str, float] = field(default_factory=dict)
    profiling: bool = True

    def values(self) -> dict[str, float | None]:
        values = self._values()
        values.update({f"DCGM_FI_PROF_PIPE_{p.upper()}_ACTIVE": v for p, v in self.pipes.items()})
        if not self.profiling:
            values = {k: None if k.startswith("DCGM_FI_PROF_") else v for k, v in values.items()}
        return values

    def _values(self) -> dict[str, float | None]:
        busy = self.util / 100
        return {"DCGM_FI_DEV_SM_CLOCK": self.sm_clock or (1980.0 if busy else 345.0),
                "DCGM_FI_DEV_GPU_TEMP": self.temp or 35.0 + 40 * busy,
                "DCGM_FI_DEV_POWER_USAGE": self.power,
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": self.energy,
                "DCGM_FI_DEV_GPU_UTIL": self.util, "DCGM_FI_DEV_XID_ERRORS": 0.0,
                "DCGM_FI_DEV_FB_FREE": 81559.0 - self.fb_used, "DCGM_FI_DEV_FB_USED": self.fb_used,
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE": busy,
                "DCGM_FI_PROF_SM_ACTIVE": busy * 0.9 if self.sm_active is None
                else self.sm_active,
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": self.tensor,
                "DCGM_FI_PROF_DRAM_ACTIVE": busy * 0.4,
                "DCGM_FI_PROF_PCIE_TX_BYTES": 1e8 * busy,
                "DCGM_FI_PROF_PCIE_RX_BYTES": 2e8 * busy if self.pcie_rx is None else self.pcie_rx,
                "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": float(self.throttle),
                "DCGM_FI_PROF_NVLINK_TX_BYTES": self.nvlink,
                "DCGM_FI_PROF_NVLINK_RX_BYTES": self.nvlink,
                **{f"DCGM_FI_PROF_PIPE_{p}_ACTIVE": None for p in ("FP64", "FP32", "FP16")}}


class DcgmEndpoint:
    """dcgm-exporter's ``/metrics`` for one host, served on a free loopback port."""

    def __init__(self, host: str, gpus: Sequence[Gpu], host_label: str = "Hostname") -> None:
        self.host, self.host_label, self.gpus = host, host_label, list(gpus)
        self.lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = endpoint.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> DcgmEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def render(self) -> str:
        with self.lock:
            out = []
            for name, kind, help_text in DCGM_FIELDS:
                written = [(gpu, value) for gpu in self.gpus
                           if (value := gpu.values()[name]) is not None]
                if written:  # as dcgm-exporter: a field no GPU has is not listed
                    out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
                for gpu, value in written:
                    for job in gpu.jobs or [None]:
                        out.append(f"{name}{{{self._labels(gpu, job)}}} {value:f}")
            return "\n".join(out) + "\n"

    def _labels(self, gpu: Gpu, job: str | None) -> str:
        parts = [("gpu", str(gpu.index)), ("UUID", gpu.uuid),
                 ("pci_bus_id", f"00000000:{0x18 + 0x10 * gpu.index:02X}:00.0"),
                 ("device", f"nvidia{gpu.index}"), ("modelName", MODEL)]
        if gpu.mig:
            parts += [("GPU_I_PROFILE", gpu.mig[0]), ("GPU_I_ID", gpu.mig[1])]
        parts += [(self.host_label, self.host), ("DCGM_FI_DRIVER_VERSION", DRIVER)]
        if job:
            parts.append(("hpc_job", job))
        return ",".join(f'{k}="{v}"' for k, v in parts)

    def update(self, index: int, mig: str | None = None, **values: object) -> None:
        """Set what a GPU (or one MIG instance of it) reports from now on."""
        with self.lock:
            for gpu in self.gpus:
                if gpu.index == index and (mig is None or (gpu.mig and gpu.mig[1] == mig)):
                    for key, value in values.items():
                        setattr(gpu, key, value)


# --- The stores that scrape them: Prometheus and VictoriaMetrics ----------------------

STORE_KINDS = ("prometheus", "victoriametrics")
# VictoriaMetrics answers from a sample only this long after it was scraped (its
# -search.latencyOffset, default flags): before that a query repeats the value before it.
VM_LATENCY_S = 30.0


@dataclass(frozen=True)
class Target:
    """A scrape target: the exporter's loopback port and the node it stands for."""

    job: str
    port: int
    host: str
    node_port: int  # the port the site's ``instance`` label names (9100, 9400)


def prometheus_config(targets: Sequence[Target], scrape_interval: str = "1s",
                      rule_files: Sequence[Path] = ()) -> dict[str, object]:
    """A scrape config for ``targets``; with ``rule_files``, Prometheus's rules section."""
    jobs: dict[str, list[Target]] = {}
    for target in targets:
        jobs.setdefault(target.job, []).append(target)
    config: dict[str, object] = {
        "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval},
        "scrape_configs": [{
            "job_name": job,
            "static_configs": [{"targets": [f"127.0.0.1:{t.port}"],
                                "labels": {"__beacon_instance": f"{t.host}:{t.node_port}"}}
                               for t in items],
            # As sites do: the instance names the node, not the address scraped.
            "relabel_configs": [{"source_labels": ["__beacon_instance"],
                                 "target_label": "instance"}],
        } for job, items in jobs.items()],
    }
    if rule_files:  # VictoriaMetrics refuses the section: rules are vmalert's there
        config["global"] = {**config["global"],  # type: ignore[dict-item]
                            "evaluation_interval": scrape_interval}
        config["rule_files"] = [str(p) for p in rule_files]
    return config


@contextmanager
def scraping_stores(targets: Sequence[Target], workdir: Path, rule_files: Sequence[Path] = (),
                    nodes: Iterable[SyntheticNode] = ()) -> Iterator[dict[str, str]]:
    """A private Prometheus (with ``rule_files``) and a private VictoriaMetrics (its own
    ``-promscrape.config``), both scraping ``targets`` every second from the same moment;
    yields each store's URL by kind, and with ``rule_files`` the URL of a ``vmalert``
    evaluating them against VictoriaMetrics. ``nodes`` tick while the stores start: the
    first store scrapes while the second starts, and flat counters there would read as
    idle CPUs in the windows of jobs that began before the scenario."""
    prom_config, vm_config = workdir / "prometheus.yml", workdir / "vm-scrape.yml"
    prom_config.write_text(yaml.safe_dump(prometheus_config(targets, rule_files=rule_files)))
    vm_config.write_text(yaml.safe_dump(prometheus_config(targets)))
    with ExitStack() as stack:
        with ticking(nodes):
            urls = {"prometheus": stack.enter_context(
                        private_prometheus(workdir, prom_config))[0],
                    "victoriametrics": stack.enter_context(private_store(
                        workdir, "victoriametrics", {"VM_SCRAPE_CONFIG": str(vm_config)}))[0]}
            _wait_scraped(urls.values(), len(targets))
            if rule_files:
                urls["vmalert"] = stack.enter_context(
                    vmalert(urls["victoriametrics"], rule_files, workdir))
        yield urls


@contextmanager
def ticking(nodes: Iterable[SyntheticNode], every: float = 0.5) -> Iterator[None]:
    """``nodes``' counters advancing in a thread of their own until the block ends (then the
    scenario's loop ticks them: never two tickers at once, they share temporary files)."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(every):
            for node in nodes:
                node.tick()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextmanager
def vmalert(datasource: str, rule_files: Sequence[Path], workdir: Path) -> Iterator[str]:
    """Debian's vmalert (the victoria-metrics package) evaluating ``rule_files`` every second
    against ``datasource``, as a VictoriaMetrics site runs Prometheus's rules; yields its URL
    (``/api/v1/rules`` and ``/api/v1/alerts`` in Prometheus's shapes). No Alertmanager: its
    notifier points at a closed port, and the alerts stay readable on the API."""
    require(shutil.which("vmalert") is not None, "vmalert",
            f"{VM_SCRIPT.relative_to(ROOT)} install (the victoria-metrics package)")
    port = free_port()
    with (workdir / "vmalert.log").open("w") as log:
        process = subprocess.Popen(
            ["vmalert", f"-datasource.url={datasource}", "-evaluationInterval=1s",
             f"-httpListenAddr=127.0.0.1:{port}", f"-notifier.url=http://127.0.0.1:{free_port()}",
             *(f"-rule={p}" for p in rule_files)], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_answering(f"{url}/api/v1/rules", process)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def _wait_answering(url: str, process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while True:
        assert process.poll() is None, f"{process.args[0]} exited ({process.returncode})"
        try:
            if requests.get(url, timeout=2).ok:
                return
        except requests.ConnectionError:
            pass
        assert time.time() < deadline, f"{url} did not answer in {timeout:.0f} s"
        time.sleep(0.2)


def _wait_scraped(urls: Iterable[str], targets: int, timeout: float = 60) -> None:
    """Until every store has scraped every target once, so that both stores' first samples
    are of the same moment. Asked of the targets API (both stores have it): VictoriaMetrics
    answers queries from a sample only 30 s after it (``VM_LATENCY_S``)."""
    deadline = time.time() + timeout
    for url in urls:
        while True:
            body = requests.get(f"{url}/api/v1/targets", timeout=5).json()
            if sum(t["health"] == "up" for t in body["data"]["activeTargets"]) >= targets:
                break
            assert time.time() < deadline, f"{url} has not scraped its {targets} targets"
            time.sleep(0.2)


@dataclass(frozen=True)
class Site:
    """A private store (``url``, of ``kind``) that scraped a test's nodes from ``t0`` to
    ``end``."""

    url: str
    t0: float
    end: float
    kind: str = "prometheus"

    def metric_labels(self, **labels: object) -> dict[str, object]:
        """A cluster's ``metric_labels`` reading this site: its store named, so that Beacon
        asks it in its own query engine (docs/metrics.md, "Stores")."""
        return {**labels, "store": self.kind}


@dataclass(frozen=True)
class Scrape:
    """The stores that scraped the same targets at once, from ``t0`` to ``end``."""

    urls: dict[str, str]
    t0: float
    end: float

    def site(self, kind: str) -> Site:
        """One store's view; VictoriaMetrics' once it shows the samples up to ``end``."""
        if kind == "victoriametrics":
            time.sleep(max(0.0, self.end + VM_LATENCY_S + 1 - time.time()))
        return Site(self.urls[kind], self.t0, self.end, kind)


@contextmanager
def scraped_site(workdir: Path, nodes: dict[str, SyntheticNode],
                 dcgm: dict[str, DcgmEndpoint], duration: float) -> Iterator[Scrape]:
    """``nodes`` served by node_exporters and ``dcgm`` endpoints (both keyed by host),
    scraped every second by a private Prometheus and a private VictoriaMetrics for
    ``duration`` seconds while the nodes' counters tick; yields the scrape with both up."""
    with ExitStack() as stack:
        for endpoint in dcgm.values():
            stack.enter_context(endpoint)
        targets = [Target("node", stack.enter_context(node_exporter(node, workdir / "run")),
                          host, 9100) for host, node in nodes.items()]
        targets += [Target("dcgm", endpoint.port, host, 9400) for host, endpoint in dcgm.items()]
        urls = stack.enter_context(scraping_stores(targets, workdir, nodes=nodes.values()))
        yield run_scenario(urls, duration, lambda t: [node.tick() for node in nodes.values()])


def run_scenario(urls: dict[str, str], duration: float,
                 step: Callable[[float], object]) -> Scrape:
    """Call ``step(seconds since t0)`` every half second for ``duration`` seconds while the
    stores scrape; the scrape's span."""
    t0 = time.time()
    while (now := time.time()) < t0 + duration:
        step(now - t0)
        time.sleep(0.5)
    return Scrape(urls, t0, time.time())


@contextmanager
def private_prometheus(workdir: Path, config: Path | None = None
                       ) -> Iterator[tuple[str, dict[str, str]]]:
    """A Prometheus of this test's own (``deploy/dev/prometheus.sh`` on a free port, data
    under ``workdir``); yields its URL and the environment that names it to the script
    (``backfill`` with it loads OpenMetrics files into this one)."""
    env = {}
    if config is not None:
        env["PROM_CONFIG"] = str(config)
    with private_store(workdir, "prometheus", env) as found:
        yield found


# store kind -> (script, port variable, data dir variable)
STORE_SCRIPTS = {"prometheus": (PROM_SCRIPT, "PROM_PORT", "PROM_DIR"),
                 "victoriametrics": (VM_SCRIPT, "VM_PORT", "VM_DIR")}


@contextmanager
def private_store(workdir: Path, kind: str, extra: dict[str, str] | None = None
                  ) -> Iterator[tuple[str, dict[str, str]]]:
    """A telemetry store of this test's own, Prometheus or VictoriaMetrics (its dev script
    on a free port, data under ``workdir``); yields its URL and the environment that names
    it to the script (``load`` with it fills this one)."""
    script, port_var, dir_var = STORE_SCRIPTS[kind]
    port = free_port()
    env = {**os.environ, port_var: str(port), dir_var: str(workdir / kind), **(extra or {})}
    env["STORE_KIND"] = kind
    done = subprocess.run([str(script), "up"], env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    require(done.returncode == 0 or "missing" not in done.stderr, kind,
            f"{script.relative_to(ROOT)} up (as root it installs the Debian package)")
    assert done.returncode == 0, done.stderr or done.stdout
    try:
        yield f"http://127.0.0.1:{port}", env
    finally:
        subprocess.run([str(script), "down"], env=env, capture_output=True, timeout=60,
                       check=False)


def backfill(env: dict[str, str], files: Sequence[Path]) -> None:
    """Load OpenMetrics ``files`` into the private store ``env`` names (promtool blocks for
    Prometheus, the import API for VictoriaMetrics)."""
    script, command = (VM_SCRIPT, "import") if env.get("STORE_KIND") == "victoriametrics" \
        else (PROM_SCRIPT, "backfill")
    done = subprocess.run([str(script), command, *map(str, files)], env=env,
                          capture_output=True, text=True, timeout=1800, check=False)
    assert done.returncode == 0, done.stderr or done.stdout


# --- AMD Device Metrics Exporter ---------------------------------------------------------

# (name, help) as the exporter registers them (pkg/amdgpu/gpuagent/gpuagent_metrics.go,
# docs/configuration/metricslist.md): every field a gauge, percentages 0-100, VRAM in MB
AMD_FIELDS = (
    ("gpu_gfx_activity", "Graphics engine usage in Percentage (0-100)"),
    ("gpu_umc_activity", "Memory engine usage in Percentage (0-100)"),
    ("gpu_used_vram", "Used VRAM memory of the GPU (in MB)"),
    ("gpu_total_vram", "Total VRAM memory of the GPU (in MB)"),
    ("gpu_package_power", "Current socker power in Watts"),
    ("gpu_power_usage", "GPU Power usage in Watts"),
    ("gpu_junction_temperature", "Current junction/hotspot temperature in Celsius"),
    ("gpu_edge_temperature", "Current edge temperature in Celsius"),
    ("gpu_violation_socket_thermal_residency_percentage",
     "Socket Thermal Percentage Violation Counter"),
    ("gpu_violation_ppt_residency_percentage",
     "Package Power Tracking Percentage Violation Counter"),
    ("gpu_ecc_correct_total", "Total Correctable error count"),
    ("gpu_ecc_uncorrect_total", "Total Uncorrectable error count"),
    ("pcie_bandwidth", "Current PCIe bandwidth in Mb/s"),
    ("gpu_prof_sm_active", "The percentage of GPUTime vector ALU instructions are processed"),
    ("gpu_prof_tensor_active_percent", "MFMA Utilization Unit percent"),
    ("gpu_prof_occupancy_percent", "GPU Occupancy as Percentage of maximum"),
    ("gpu_prof_valu_pipe_issue_util", "Percentage of the time that GUI is active"),
)
AMD_MODEL = "AMD Instinct MI300X"
XGMI_LINKS = 8


@dataclass
class AmdGpu:
    """One MI300X and what it reports now; ``job`` is (job id, user, partition) while the
    exporter's Slurm integration has a job on it."""

    index: int
    gfx: float = 0.0  # %
    valu: float = 0.0  # gpu_prof_sm_active, %
    mfma: float = 0.0  # %
    vram: float = 300.0  # MB
    power: float = 140.0
    temp: float = 45.0  # junction, °C
    sclk: float = 132.0  # MHz, each XCD's GFX clock
    thermal: float = 0.0  # % of the time held back by socket thermal
    xgmi_kbps: float = 0.0  # KB/s on each of links 1-7
    job: tuple[str, str, str] | None = None
    xgmi_kb: float = 0.0  # each link's running total
    last: float = 0.0
    valu_issue: float | None = None  # gpu_prof_valu_pipe_issue_util, % (None: not written)
    profiler: bool = True  # False: ProfilerMetrics off, no gpu_prof_* field

    def values(self) -> dict[str, float | None]:
        values = self._values()
        if not self.profiler:
            values = {k: None if k.startswith("gpu_prof_") else v for k, v in values.items()}
        return values

    def _values(self) -> dict[str, float | None]:
        return {"gpu_gfx_activity": self.gfx, "gpu_umc_activity": self.gfx * 0.4,
                "gpu_used_vram": self.vram, "gpu_total_vram": 196592.0,
                "gpu_package_power": self.power, "gpu_power_usage": self.power,
                "gpu_junction_temperature": self.temp,
                "gpu_edge_temperature": self.temp - 12,
                "gpu_violation_socket_thermal_residency_percentage": self.thermal,
                "gpu_violation_ppt_residency_percentage": 0.0,
                "gpu_ecc_correct_total": 0.0, "gpu_ecc_uncorrect_total": 0.0,
                "pcie_bandwidth": 4000.0 * self.gfx / 100, "gpu_prof_sm_active": self.valu,
                "gpu_prof_tensor_active_percent": self.mfma,
                "gpu_prof_occupancy_percent": self.valu * 0.6,
                "gpu_prof_valu_pipe_issue_util": self.valu_issue}


class AmdEndpoint:
    """The AMD exporter's ``/metrics`` for one host, on a free loopback port, with its
    site ``prefix`` (``MetricsFieldPrefix``); XGMI totals grow with wall time."""

    def __init__(self, host: str, gpus: Sequence[AmdGpu], prefix: str = "") -> None:
        self.host, self.prefix, self.gpus = host, prefix, list(gpus)
        self.lock = threading.Lock()
        self.server, self.port, self.thread = _serve(self.render)

    def __enter__(self) -> AmdEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def render(self) -> str:
        with self.lock:
            now = time.time()
            for gpu in self.gpus:
                gpu.xgmi_kb += gpu.xgmi_kbps * (now - gpu.last if gpu.last else 0.0)
                gpu.last = now
            out = []
            for name, help_text in AMD_FIELDS:
                written = [(g, v) for g in self.gpus if (v := g.values()[name]) is not None]
                if written:
                    out += self._family(name, help_text)
                out += [f"{self.prefix}{name}{{{self._labels(g)}}} {v:f}" for g, v in written]
            out += self._family("gpu_clock", "List of current GPU clock frequencies in MHz")
            for gpu in self.gpus:
                out += [f'{self.prefix}gpu_clock{{clock_index="{i}",clock_type="system",'
                        f'{self._labels(gpu)}}} {gpu.sclk:f}' for i in range(2)]
                out.append(f'{self.prefix}gpu_clock{{clock_index="8",clock_type="memory",'
                           f'{self._labels(gpu)}}} 1300.000000')
            for name, what in (("gpu_xgmi_link_rx", "Read"), ("gpu_xgmi_link_tx", "Write")):
                out += self._family(name, f"XGMI Link Data {what} in KB")
                for gpu in self.gpus:
                    out += [f'{self.prefix}{name}{{link_index="{link}",{self._labels(gpu)}}} '
                            f'{gpu.xgmi_kb if link else 0.0:f}' for link in range(XGMI_LINKS)]
            return "\n".join(out) + "\n"

    def _family(self, name: str, help_text: str) -> list[str]:
        return [f"# HELP {self.prefix}{name} {help_text}", f"# TYPE {self.prefix}{name} gauge"]

    def _labels(self, gpu: AmdGpu) -> str:
        # the mandatory labels, and the Slurm ones (always exported, empty without a job)
        job, user, partition = gpu.job or ("", "", "")
        parts = [("card_model", AMD_MODEL), ("gpu_compute_partition_type", "spx"),
                 ("gpu_id", str(gpu.index)), ("gpu_partition_id", "0"),
                 ("hostname", self.host), ("job_id", job), ("job_partition", partition),
                 ("job_user", user), ("serial_number", f"692251{gpu.index:06d}")]
        return ",".join(f'{k}="{v}"' for k, v in parts)

    def update(self, index: int, **values: object) -> None:
        with self.lock:
            for key, value in values.items():
                setattr(self.gpus[index], key, value)


def _serve(render: Callable[[], str]) -> tuple[ThreadingHTTPServer, int, threading.Thread]:
    """A ``/metrics`` server on a free loopback port (not started) answering ``render()``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    return server, int(server.server_address[1]), threading.Thread(
        target=server.serve_forever, daemon=True)
