"""The embedded SQLite database is readable by its owner only (issue 27).

SQLite creates a database with the process's default mode (0644 under the usual umask): every
local user could read the sessions, API token digests and audit log in it. Settings create a
missing database file 0600 before the first connection (``portal.env.private_file``); this
receiver tightens one that already exists, after any connection, with its -wal and -shm
files (test databases too, which the test runner re-creates).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

SUFFIXES = ("", "-wal", "-shm", "-journal")


def restrict_sqlite_files(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created`` receiver: chmod 0600 the database files others could read."""
    if connection.vendor != "sqlite":
        return
    name = str(connection.settings_dict["NAME"])
    if not name or name == ":memory:" or name.startswith("file:"):
        return
    for suffix in SUFFIXES:
        make_private(Path(name + suffix))


def make_private(path: Path) -> None:
    """chmod 0600 a file of ours that group or others can read or write (others' files, and
    files that vanished since, are left alone)."""
    try:
        info = path.stat()
        if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077:
            path.chmod(0o600)
    except FileNotFoundError:
        pass
