#!/usr/bin/env python3
"""beacon-inventory: a node's security-relevant software versions, posted to Beacon.

Runs on each compute node (a systemd timer, or a Slurm HealthCheckProgram), reads the
versions of Slurm, MUNGE, the NVIDIA Container Toolkit, the NVIDIA driver and the PyTorch
of the site's modules, and posts Beacon's inventory document

    {"cluster": C, "inventories": [{"node": N, "collected_at": ISO-8601,
                                    "software": {"slurm": "22.05.8", ...}}]}

to ``BEACON_URL/api/v1/security/ingest/inventory/`` with ``Authorization: Token ...``
(a platform admin's or a service account's API token). Python 3.6+, standard library
only. See deploy/collectors/README.md.

Versions come from the package manager when it owns the binary that runs (dpkg, rpm):
a distribution backport keeps the upstream number but changes the package revision
(``0.5.15-2+deb12u1``), which Beacon's allow-list can name. Otherwise from the tool
itself (``munged --version``). A component that is not installed is left out; one that
is installed but cannot be read is reported on stderr and left out.

Exit status: 0 posted (or written with --output only), 1 usage or configuration error,
2 Beacon refused or could not be reached.
"""

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request

CONFIG = "/etc/beacon/collector.conf"
INGEST_PATH = "/api/v1/security/ingest/inventory/"
_VERSION = re.compile(r"(?<![\w.])v?(\d+(?:\.\d+)+(?:[-+~][0-9A-Za-z.+~-]*)?)")
TORCH = "import sys, torch; sys.stdout.write(torch.__version__)"

# (inventory name, commands): the first command installed is asked; its first
# version-looking word is the version ("slurm-wlm 22.05.8", "munge-0.5.15 (2022-06-22)",
# "NVIDIA Container Toolkit CLI version 1.17.8", one driver version per GPU).
TOOLS = [
    ("slurm", [["sinfo", "--version"], ["slurmd", "-V"]]),
    ("munge", [["munged", "--version"]]),
    ("nvidia_container_toolkit", [["nvidia-ctk", "--version"],
                                  ["nvidia-container-runtime-hook", "--version"]]),
    ("nvidia_driver", [["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]]),
]


def log(message):
    sys.stderr.write(f"beacon-inventory: {message}\n")


def read_config(path):
    """KEY=VALUE lines (shell-style quoting, # comments) of the shared collector config."""
    values = {}
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#") or "=" not in line:
                    continue
                key, _, value = line.partition("=")
                parts = shlex.split(value, comments=True)
                values[key.strip()] = " ".join(parts)
    except OSError:
        pass
    return values


def run(argv, timeout, env=None):
    """stdout of ``argv`` (None when it fails or is missing)."""
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=timeout, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def first_version(text):
    match = _VERSION.search(text or "")
    return match.group(1) if match else None


def package_version(path, timeout):
    """(package, version) of the distribution package owning ``path``, if any."""
    real = os.path.realpath(path)
    if shutil.which("dpkg-query"):
        owner = run(["dpkg-query", "-S", real], timeout)
        if owner and ":" in owner:
            package = owner.split(":", 1)[0].split(",")[0].strip()
            version = run(["dpkg-query", "-W", "-f=${Version}", package], timeout)
            if version and version.strip():
                return package, version.strip()
    if shutil.which("rpm"):
        version = run(["rpm", "-qf", "--qf", "%{VERSION}-%{RELEASE}", real], timeout)
        if version and version.strip() and "not owned" not in version:
            return "rpm", version.strip().splitlines()[0]
    return None


def tool_versions(timeout, use_packages=True):
    found, problems = {}, []
    for name, commands in TOOLS:
        for argv in commands:
            path = shutil.which(argv[0])
            if path is None:
                continue
            owned = package_version(path, timeout) if use_packages else None
            if owned is not None:
                found[name] = owned[1]
                break
            version = first_version(run([path, *argv[1:]], timeout))
            if version:
                found[name] = version
            else:
                problems.append(f"{name}: {' '.join(argv)} gave no version")
            break
        else:
            if name == "nvidia_driver":
                version = _sysfs_driver()
                if version:
                    found[name] = version
    return found, problems


def _sysfs_driver():
    try:
        with open("/sys/module/nvidia/version") as f:
            return first_version(f.read())
    except OSError:
        return None


def torch_versions(modules, pythons, timeout, module_init):
    """PyTorch of each named site module (``pytorch:<module>``) and interpreter
    (``pytorch:<path>``); the node's own python3 as plain ``pytorch``."""
    found, problems = {}, []
    bash = shutil.which("bash") or "/bin/bash"
    for module in modules:
        # Lmod/Environment Modules define `module` as a shell function: a login shell (or
        # the init script named by BEACON_MODULE_INIT) brings it.
        load = (f"module load {shlex.quote(module)} >/dev/null 2>&1 && "
                f"python3 -c {shlex.quote(TORCH)}")
        if module_init:
            argv = [bash, "--noprofile", "--norc", "-c",
                    f". {shlex.quote(module_init)} >/dev/null 2>&1; {load}"]
        else:
            argv = [bash, "-lc", load]
        version = first_version(run(argv, timeout))
        if version:
            found["pytorch:" + module] = version
        else:
            problems.append(f"module {module}: no torch version (module missing, or no torch)")
    for python in pythons:
        version = first_version(run([python, "-c", TORCH], timeout))
        if version:
            found["pytorch:" + python] = version
        else:
            problems.append(f"{python}: no torch version")
    system = shutil.which("python3")
    if system:
        version = first_version(run([system, "-c", TORCH], timeout))
        if version:
            found["pytorch"] = version
    return found, problems


def document(node, software, now=None):
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return {"node": node, "collected_at": now.replace(microsecond=0).isoformat(),
            "software": software}


def post(url, token, cluster, doc, timeout):
    """POST the document; returns Beacon's counts (raises RuntimeError saying why not)."""
    if not url.startswith(("https://", "http://")):
        raise RuntimeError("BEACON_URL must start with https:// (or http:// for a test)")
    body = json.dumps({"cluster": cluster, "inventories": [doc]}).encode()
    request = urllib.request.Request(  # noqa: S310 (the scheme is checked above)
        url.rstrip("/") + INGEST_PATH, data=body, method="POST",
        headers={"Content-Type": "application/json", "Authorization": "Token " + token,
                 "User-Agent": "beacon-inventory/1"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return json.loads(response.read().decode() or "{}")
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise RuntimeError(f"Beacon answered {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise RuntimeError(f"cannot reach Beacon at {url}: {exc}") from None


def read_token(path, env_token):
    if env_token:
        return env_token.strip()
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as exc:
        raise RuntimeError(f"cannot read the token file {path}: {exc}") from None


def arguments(argv):
    parser = argparse.ArgumentParser(
        prog="beacon-inventory", description="Post this node's software versions to Beacon.")
    parser.add_argument("--config", default=os.environ.get("BEACON_COLLECTOR_CONFIG", CONFIG))
    parser.add_argument("--url", help="Beacon's base URL (BEACON_URL)")
    parser.add_argument("--cluster", help="the cluster's name in Beacon (BEACON_CLUSTER)")
    parser.add_argument("--token-file", help="file holding the API token (BEACON_TOKEN_FILE)")
    parser.add_argument("--node", help="node name (default: the short host name)")
    parser.add_argument("--module", action="append", default=[],
                        help="a site module whose PyTorch to report (repeatable; BEACON_MODULES)")
    parser.add_argument("--python", action="append", default=[],
                        help="an interpreter whose PyTorch to report (repeatable; BEACON_PYTHONS)")
    parser.add_argument("--output", help="also write the document to this file ('-': stdout)")
    parser.add_argument("--no-post", action="store_true", help="do not post (with --output)")
    parser.add_argument("--no-packages", action="store_true",
                        help="read versions from the tools only, not dpkg/rpm")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per command")
    return parser.parse_args(argv)


def main(argv=None):
    args = arguments(argv)
    conf = read_config(args.config)

    def setting(value, key, default=""):
        return value or os.environ.get(key) or conf.get(key) or default

    url = setting(args.url, "BEACON_URL")
    cluster = setting(args.cluster, "BEACON_CLUSTER")
    token_file = setting(args.token_file, "BEACON_TOKEN_FILE", "/etc/beacon/collector.token")
    modules = args.module or setting(None, "BEACON_MODULES").split()
    pythons = args.python or setting(None, "BEACON_PYTHONS").split()
    node = args.node or socket.gethostname().split(".")[0]
    if not args.no_post and not (url and cluster):
        log("set BEACON_URL and BEACON_CLUSTER (or --url, --cluster), or use --no-post")
        return 1
    software, problems = tool_versions(args.timeout, not args.no_packages)
    torch, more = torch_versions(modules, pythons, max(args.timeout, 60.0),
                                 setting(None, "BEACON_MODULE_INIT"))
    software.update(torch)
    for problem in problems + more:
        log(problem)
    doc = document(node, software)
    if args.output:
        text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
        if args.output == "-":
            sys.stdout.write(text)
        else:
            with open(args.output, "w") as f:
                f.write(text)
    if args.no_post:
        return 0
    try:
        token = read_token(token_file, os.environ.get("BEACON_TOKEN"))
        result = post(url, token, cluster, doc, args.timeout)
    except RuntimeError as exc:
        log(str(exc))
        return 2
    log(f"posted {len(software)} components of {node}: {json.dumps(result)}")
    return 0 if result.get("stored", 0) + result.get("duplicates", 0) >= 1 else 2


if __name__ == "__main__":
    sys.exit(main())
