"""A private, throw-away redis-server for fault tests: started, killed and restarted for real.

It listens on a free loopback port and keeps an append-only file fsynced on every write
(``appendfsync always``) in its own folder, so a ``kill -9`` loses nothing that was
acknowledged: what a broker configured for durability does (docker-compose.yml keeps an
append-only file too, fsynced every second).
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateRedis:
    """``start()``, ``kill()`` (SIGKILL, like a crash) and ``start()`` again on the same data."""

    def __init__(self, folder: Path, port: int | None = None) -> None:
        self.folder, self.port = folder, port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    def start(self, timeout: float = 20.0) -> None:
        assert self.proc is None, "already running"
        self.folder.mkdir(parents=True, exist_ok=True)
        log = open(self.folder / "redis.log", "ab")  # noqa: SIM115 (closed with the process)
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.folder), "--appendonly", "yes", "--appendfsync", "always",
             "--save", "", "--daemonize", "no"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {self._log_tail()}")
            try:
                if self.client().ping():
                    return
            except redis.exceptions.ConnectionError:
                time.sleep(0.1)
            except redis.exceptions.BusyLoadingError:  # replaying the append-only file
                time.sleep(0.1)
        raise RuntimeError(f"redis-server did not answer within {timeout}s: {self._log_tail()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final save; what survives is what was fsynced."""
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc = None

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2,
                           socket_connect_timeout=2)

    def _log_tail(self) -> str:
        path = self.folder / "redis.log"
        return path.read_text(errors="replace")[-1000:] if path.exists() else ""
