"""Reading the environment: typed helpers that name the variable on a bad value.

``portal/settings.py`` reads every variable through these (``python -m portal.reference``
lists them all in docs/CONFIGURATION.md). ``env_str`` also reads ``NAME_FILE``: the
contents of that file, for secrets kept out of the environment.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    """Return ``$name``, or the contents of the file named by ``$name_FILE`` (secrets)."""
    file_name = os.environ.get(f"{name}_FILE")
    if file_name:
        try:
            return Path(file_name).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_name}: cannot read it ({exc})") from exc
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    """Read a boolean; anything but 1/0/true/false/yes/no/on/off is an error."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r}: expected a boolean (1/0, true/false, yes/no)")


def env_int(name: str, default: int, minimum: int | None = None) -> int:
    """Read an integer, optionally with a lower bound."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r}: expected an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r}: must be at least {minimum}")
    return value


def env_list(name: str, default: str = "") -> list[str]:
    """Read a comma-separated list; blanks are dropped."""
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """Read one value out of a fixed set."""
    value = env_str(name, default).strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r}: expected one of {', '.join(choices)}")
    return value


_RATE = re.compile(r"^(\d+)/(s|sec|second|m|min|minute|h|hour|d|day)$")


def env_rate(name: str, default: str) -> str | None:
    """Read a request rate as DRF's throttles take it (``600/min``, ``10/s``, ``5000/day``);
    ``off`` turns that limit off (None)."""
    value = env_str(name, default).strip().lower()
    if value == "off":
        return None
    match = _RATE.match(value)
    if not match or int(match[1]) < 1:
        raise ImproperlyConfigured(
            f"{name}={value!r}: expected requests per period, e.g. 600/min, 10/s, 5000/day, or off")
    return value


def database_from_url(url: str) -> dict[str, object]:
    """Turn ``postgres://user:pass@host:port/db?opt=v`` or ``sqlite:///path`` into DATABASES."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("postgres", "postgresql", "pgsql"):
        if not parts.path.strip("/"):
            raise ImproperlyConfigured(f"DATABASE_URL={url!r}: no database name in the path")
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path.lstrip("/")),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "OPTIONS": dict(parse_qsl(parts.query)),
            "CONN_MAX_AGE": env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0),
            "CONN_HEALTH_CHECKS": True,
        }
    if scheme == "sqlite":
        # SQLAlchemy's convention: sqlite:///relative.db, sqlite:////absolute/path.db
        path = unquote(parts.path)[1:]
        if not path:
            raise ImproperlyConfigured(f"DATABASE_URL={url!r}: no file path (sqlite:////abs/path)")
        return sqlite_database(Path(path))
    raise ImproperlyConfigured(
        f"DATABASE_URL={url!r}: unsupported scheme {scheme!r} (use postgres:// or sqlite:///)"
    )


def sqlite_database(path: Path) -> dict[str, object]:
    # WAL lets the eager in-process tasks write while pages read. With WAL, synchronous=NORMAL
    # keeps the database consistent on a crash (it may lose the last commits on power loss)
    # and saves an fsync per commit: imports commit per job, and each fsync cost milliseconds.
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "OPTIONS": {"timeout": 20,
                    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"},
    }


def private_dir(path: Path) -> Path:
    """Create ``path`` readable by its owner only (0700) when it does not exist yet: it holds
    the secret key and the embedded database. An existing folder is left as it is (the
    operator chose it) and ``core.W006`` names it when others can read it."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def private_file(path: Path) -> None:
    """Create an empty ``path`` with mode 0600 if it is missing, so SQLite opens a file only
    its owner can read (SQLite creates its database, -wal and -shm files with the default
    0644; it gives the -wal and -shm files the mode of the database file)."""
    if path.parent.is_dir() and not path.exists():
        path.touch(mode=0o600)


def secret_key(data_dir: Path) -> str:
    """SECRET_KEY from the environment, else one generated once and kept in the data folder."""
    key = env_str("SECRET_KEY")
    if key:
        if len(key) < 32:
            raise ImproperlyConfigured("SECRET_KEY: must be at least 32 characters long")
        return key
    key_file = data_dir / "secret_key"
    if key_file.exists():
        return key_file.read_text().strip()
    private_dir(data_dir)
    key = secrets.token_urlsafe(50)
    key_file.touch(mode=0o600)
    key_file.write_text(key)
    return key
