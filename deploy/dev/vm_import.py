"""Load OpenMetrics files into a VictoriaMetrics through its import API (victoria-metrics.sh).

    python3 deploy/dev/vm_import.py http://127.0.0.1:18428 FILE...

The twin of ``prometheus.sh backfill`` (promtool blocks): the same OpenMetrics text, posted to
``/api/v1/import/prometheus``. That endpoint reads Prometheus's text format, whose timestamps
are integer milliseconds, while OpenMetrics' are seconds (with a fraction): each sample line is
rewritten, comments (HELP, TYPE, ``# EOF``) are dropped. Then the store is made to answer for
what it took: ``/internal/force_flush`` turns the buffered rows into searchable parts (else
they appear within about a second) and ``/internal/resetRollupResultCache`` drops any answer
cached from before the data was there. Standard library only: it runs before the venv exists.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator

BATCH = 4 << 20  # bytes per POST: small enough for -maxInsertRequestSize, few requests


def to_millis(line: str) -> str | None:
    """One OpenMetrics line as a Prometheus text line with a ms timestamp (None: skip it)."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    # The labels end at the last "}" (a label value may hold spaces, never after the "}");
    # what follows is the value and, optionally, the timestamp in seconds.
    cut = line.rfind("}") + 1 if "}" in line else line.find(" ")
    series, rest = line[:cut], line[cut:].split()
    if len(rest) not in (1, 2):
        raise ValueError(f"not a sample line (exemplars are not supported): {line[:200]}")
    if len(rest) == 1:
        return f"{series} {rest[0]}"
    return f"{series} {rest[0]} {round(float(rest[1]) * 1000)}"


def batches(lines: Iterable[str]) -> Iterator[bytes]:
    chunk: list[str] = []
    size = 0
    for raw in lines:
        line = to_millis(raw)
        if line is None:
            continue
        chunk.append(line)
        size += len(line) + 1
        if size >= BATCH:
            yield ("\n".join(chunk) + "\n").encode()
            chunk, size = [], 0
    if chunk:
        yield ("\n".join(chunk) + "\n").encode()


def call(url: str, body: bytes | None = None) -> None:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{url}: not an http(s) URL")
    request = urllib.request.Request(url, data=body, method="POST" if body else "GET")  # noqa: S310  # http(s) checked above
    try:
        with urllib.request.urlopen(request, timeout=300) as response:  # noqa: S310  # as above
            if response.status not in (200, 204):
                raise RuntimeError(f"{url}: HTTP {response.status}")
    except urllib.error.HTTPError as exc:  # the store says why (a bad line, a limit)
        raise RuntimeError(f"{url}: HTTP {exc.code}: {exc.read()[:500]!r}") from exc


def load(base: str, paths: list[str]) -> int:
    """Post every file's samples; returns how many requests were made."""
    posts = 0
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            for body in batches(fh):
                call(f"{base}/api/v1/import/prometheus", body)
                posts += 1
    call(f"{base}/internal/force_flush")
    call(f"{base}/internal/resetRollupResultCache")
    return posts


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: vm_import.py URL FILE...", file=sys.stderr)
        return 2
    try:
        posts = load(argv[1].rstrip("/"), argv[2:])
    except (OSError, ValueError, RuntimeError, urllib.error.URLError) as exc:
        print(f"vm_import.py: {exc}", file=sys.stderr)
        return 1
    print(f"victoria-metrics.sh: imported {len(argv) - 2} file(s) in {posts} request(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
