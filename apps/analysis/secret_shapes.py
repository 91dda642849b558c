"""Token shapes in job scripts and environments: find them, never keep them.

A scan returns, per secret, its kind, where it is (line and column), a keyed fingerprint
(HMAC-SHA256 under a site key, so equal secrets share a fingerprint without the secret
being recoverable from it, even a short password) and a preview of the line with every
secret replaced by ``[REDACTED <kind>]``. The secret itself never leaves :func:`scan`.

Shapes follow gitleaks and detect-secrets: Hugging Face (``hf_`` + 34 letters), GitHub
(``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_`` + 36, ``github_pat_`` + 82), AWS access key
ids, Google API keys, Slack tokens, PEM private keys, passwords inside URLs, and
``*_TOKEN=``/``*_SECRET=``/``*PASSWORD=`` assignments of a high-entropy literal.
Placeholders (``$HF_TOKEN``, ``<token>``, ``xxxx``, ``changeme``) and low-entropy strings are
not secrets. Every pattern is bounded, so hostile input cannot make a scan slow, and the
text is capped (``MAX_TEXT``) and scanned line by line (lines capped at ``MAX_LINE``).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
from collections import Counter
from dataclasses import dataclass

MAX_TEXT = 1_000_000
MAX_LINE = 20_000
PREVIEW = 160


@dataclass(frozen=True)
class Shape:
    """One kind of secret: a pattern (group ``secret`` is the secret) and its severity."""

    kind: str
    label: str
    pattern: re.Pattern[str]
    severity: str = "high"
    min_entropy: float = 3.0


def _shape(kind: str, label: str, regex: str, severity: str = "high",
           min_entropy: float = 3.0) -> Shape:
    return Shape(kind, label, re.compile(regex), severity, min_entropy)


SHAPES: tuple[Shape, ...] = (
    _shape("private_key", "private key",
           r"(?P<secret>-----BEGIN (?:[A-Z]{1,12} ){0,3}PRIVATE KEY(?: BLOCK)?-----)",
           min_entropy=0.0),
    _shape("huggingface", "Hugging Face token", r"(?<![A-Za-z0-9_])(?P<secret>hf_[A-Za-z]{34})"
           r"(?![A-Za-z0-9])"),
    _shape("github", "GitHub token",
           r"(?<![A-Za-z0-9_])(?P<secret>gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{82})"
           r"(?![A-Za-z0-9_])"),
    _shape("aws_access_key", "AWS access key id",
           r"(?<![A-Z0-9])(?P<secret>(?:AKIA|ASIA|AGPA|AIDA|AROA)[A-Z0-9]{16})(?![A-Z0-9])"),
    _shape("google_api_key", "Google API key",
           r"(?<![A-Za-z0-9_-])(?P<secret>AIza[A-Za-z0-9_-]{35})(?![A-Za-z0-9_-])"),
    _shape("slack", "Slack token",
           r"(?<![A-Za-z0-9])(?P<secret>xox[abposr]-[A-Za-z0-9-]{10,200})"),
    _shape("url_password", "password in a URL",
           r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^\s/:@'\"]{1,64}:(?P<secret>[^\s/@'\"]{1,128})@"
           r"[A-Za-z0-9.-]{1,253}", severity="medium", min_entropy=0.0),
    _shape("generic_secret", "secret in an assignment",
           r"(?i)\b[A-Z0-9_]{0,40}(?:SECRET|TOKEN|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY)"
           r"[A-Z0-9_]{0,40}\s{0,4}[:=]\s{0,4}['\"]?(?P<secret>[^\s'\"$`;|&<>(){}]{16,256})",
           severity="medium", min_entropy=3.5),
)
_PLACEHOLDER = re.compile(r"(?i)^(?:x+|\*+|\.+|<[^>]*>|\{\{.*\}\}|%\w+%|changeme|password|"
                          r"secret|token|your[_-]?\w*|example\w*|dummy\w*|redacted\w*|none|null)$")
_WORD = re.compile(r"[A-Za-z0-9+/_=-]{20,}")


@dataclass(frozen=True)
class SecretMatch:
    """A secret found in a text: kind, place, keyed fingerprint, redacted preview."""

    kind: str
    label: str
    severity: str
    line: int
    column: int
    length: int
    fingerprint: str
    preview: str


def entropy(text: str) -> float:
    """Shannon entropy in bits per character (0 for an empty string)."""
    if not text:
        return 0.0
    counts = Counter(text)
    total = len(text)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def fingerprint(secret: str, key: bytes) -> str:
    """A short keyed digest of ``secret``: stable per site key, not reversible."""
    digest = hmac.new(key, secret.encode("utf-8", "replace"), hashlib.sha256).hexdigest()
    return f"hmac-sha256:{digest[:16]}"


def scan(text: str, key: bytes) -> list[SecretMatch]:
    """Every secret in ``text`` (first ``MAX_TEXT`` characters), in reading order."""
    found: list[SecretMatch] = []
    for number, line in enumerate(text[:MAX_TEXT].splitlines(), start=1):
        found.extend(_scan_line(line[:MAX_LINE], number, key))
    return found


def _scan_line(line: str, number: int, key: bytes) -> list[SecretMatch]:
    spans: list[tuple[int, int, Shape]] = []
    for shape in SHAPES:
        for match in shape.pattern.finditer(line):
            start, end = match.span("secret")
            if _overlaps(spans, start, end) or not _is_secret(match.group("secret"), shape):
                continue
            spans.append((start, end, shape))
    if not spans:
        return []
    preview = redact(line, [(s, e, shape.label) for s, e, shape in spans])
    return [SecretMatch(shape.kind, shape.label, shape.severity, number, start + 1, end - start,
                        fingerprint(line[start:end], key), preview)
            for start, end, shape in sorted(spans, key=lambda item: item[0])]


def _overlaps(spans: list[tuple[int, int, Shape]], start: int, end: int) -> bool:
    return any(start < e and s < end for s, e, _ in spans)


def _is_secret(value: str, shape: Shape) -> bool:
    """Placeholders, variable references and low-entropy strings are not secrets."""
    if value.startswith(("$", "%", "{", "<")) or _PLACEHOLDER.match(value):
        return False
    return entropy(value) >= shape.min_entropy


def redact(line: str, spans: list[tuple[int, int, str]]) -> str:
    """``line`` with each span replaced, other long high-entropy words masked, printable
    ASCII only and at most ``PREVIEW`` characters: safe to store and show."""
    out, pos = [], 0
    for start, end, label in sorted(spans):
        out += [line[pos:start], f"[REDACTED {label}]"]
        pos = end
    out.append(line[pos:])
    text = _WORD.sub(_mask_word, "".join(out))
    text = "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in text).strip()
    return text if len(text) <= PREVIEW else text[:PREVIEW - 1] + "…"


def _mask_word(match: re.Match[str]) -> str:
    """Mask what looks random (letters and digits mixed, high entropy), not paths or flags."""
    word = match.group()
    mixed = any(ch.isdigit() for ch in word) and any(ch.isalpha() for ch in word)
    return "[REDACTED]" if mixed and entropy(word) >= 3.5 else word
