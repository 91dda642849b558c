"""A private PostgreSQL 15 cluster for fault tests: initdb in a temporary folder, a free
loopback port, trust authentication; stopped (fast or immediate, i.e. a crash) and started
again for real. Never the shared server on 5432."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg

from tests.integration.redis_server import free_port

BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))


class PrivatePostgres:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="beacon-pg-", dir="/tmp"))
        self.data, self.log, self.port = self.root / "data", self.root / "pg.log", free_port()
        self._as_postgres = os.geteuid() == 0  # initdb refuses root
        if self._as_postgres:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/beacon"

    @staticmethod
    def available() -> bool:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return os.geteuid() != 0 and (BIN / "initdb").exists()
        return (BIN / "initdb").exists()

    def _run(self, *cmd: str) -> None:
        args = [str(BIN / cmd[0]), *cmd[1:]]
        if self._as_postgres:
            args = ["runuser", "-u", "postgres", "--", *args]
        done = subprocess.run(args, capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"{cmd[0]} failed: {done.stdout}{done.stderr}"
                               f"{self.log.read_text() if self.log.exists() else ''}"[-3000:])

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres",
                  "--no-sync", "-E", "UTF8")
        self.start()
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE beacon")

    def start(self) -> None:
        opts = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                "-c max_connections=40")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w",
                  "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        """``fast``: disconnect everyone, roll back open transactions, shut down cleanly.
        ``immediate``: no checkpoint, as after a crash (recovery replays the WAL)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def dsn(self, db: str = "beacon") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={db} connect_timeout=5"

    def query(self, sql: str, *params: object) -> list[tuple[object, ...]]:
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            cursor = conn.execute(sql, params)
            return list(cursor.fetchall()) if cursor.description else []

    def destroy(self) -> None:
        with contextlib.suppress(RuntimeError):  # already stopped
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
