"""The configuration reference: every environment variable Beacon reads, its default, its effect.

    python -m portal.reference            # writes docs/CONFIGURATION.md
    python -m portal.reference --check    # exit 1 when docs/CONFIGURATION.md is out of date

Read from the source, not by running it (running would need every variable set to show every
branch): each call to a ``portal/env.py`` reader in portal/settings.py and portal/sso.py gives
the name, type, default, minimum or choices; the comment that heads the call's paragraph (and
one at the end of its line) gives the effect; the ``# --- Section`` line above gives the
section. A reader inside a helper function (LDAP, OIDC, the database URL) is listed in the
section where settings.py calls that helper. Then the few variables code reads itself with
``os.environ``. A variable whose comment says nothing gets a line in ``NOTES``; the test
(tests/core/test_configuration.py) fails on a variable with no effect at all.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = ROOT / "portal" / "settings.py"
HELPERS = [ROOT / "portal" / "env.py", ROOT / "portal" / "sso.py"]
DIRECT_ROOTS = [ROOT / "apps", ROOT / "portal"]
OUTPUT = ROOT / "docs" / "CONFIGURATION.md"

READERS = {"env_str": "text", "env_bool": "boolean", "env_int": "integer", "env_list": "list",
           "env_choice": "one of",
           "env_rate": "rate (`N/s`, `N/min`, `N/h`, `N/day`) or `off`",
           "_required": "text, required when that sign-on is on"}
_SECTION = re.compile(r"^#\s*---\s*(.*?)\s*-*\s*$")

_WEBHOOK_TIMEOUT = "seconds a webhook request may take, connecting and answering together"
# Effects the source's comments do not give (helpers without comments, terse lines).
NOTES: dict[str, str] = {
    "BEACON_DATA_DIR": "where the SQLite database, the generated secret key and the demo's "
                       "folder live (created 0700, the database 0600; `core.W006` names an "
                       "existing one others can read)",
    "DEBUG": "Django's debug mode: error pages with tracebacks, the browsable API; never in "
             "production",
    "SECRET_KEY": "Django's signing key, at least 32 characters; unset: one is generated once "
                  "into `BEACON_DATA_DIR/secret_key` (mode 0600)",
    "DEMO_T0": "set by the Makefile, not by hand: when `make demo` started (epoch seconds), so "
               "the demo's steps and \"ready in N s\" count from there, install included",
    "SITE_URL": "the portal's public address, for links in e-mails, webhooks and digests "
                "(`make demo` sets it to `http://HOST:PORT`); an `https://` address turns on "
                "secure cookies",
    "ALLOWED_HOSTS": "host names the portal answers to (comma-separated)",
    "CSRF_TRUSTED_ORIGINS": "origins allowed to send forms (default: `SITE_URL`)",
    "DATABASE_URL": "`postgres://user:pass@host:port/db?opt=v` (PostgreSQL, psycopg 3) or "
                    "`sqlite:///path`; unset: SQLite in `BEACON_DATA_DIR/beacon.sqlite3`",
    "DATABASE_CONN_MAX_AGE": "seconds a PostgreSQL connection is kept for reuse (health-checked "
                             "before each request)",
    "SECURE_HSTS_SECONDS": "HSTS max-age, when cookies are secure",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "HSTS `includeSubDomains`, when cookies are secure",
    "SECURE_HSTS_PRELOAD": "HSTS `preload`, when cookies are secure",
    "SECURE_SSL_REDIRECT": "redirect plain HTTP to HTTPS (except `/health/` and `/metrics`), "
                           "when cookies are secure",
    "LDAP_SERVER_URI": "turns LDAP sign-in on: `ldaps://ldap.example.org` (or `ldap://` with "
                       "`LDAP_START_TLS`)",
    "LDAP_START_TLS": "upgrade an `ldap://` connection with STARTTLS",
    "LDAP_GROUP_TYPE": "how the directory stores groups",
    "LDAP_TIMEOUT": "network and operation timeout, seconds: a down directory fails fast and "
                    "closed",
    "LDAP_REQUIRE_GROUP": "DN of the group allowed to sign in",
    "LDAP_USER_DN_TEMPLATE": "direct bind as the user, e.g. `uid=%(user)s,ou=people,dc=example,"
                             "dc=org`",
    "LDAP_BIND_DN": "without a DN template: the read-only account that searches for users",
    "LDAP_BIND_PASSWORD": "that account's password",
    "LDAP_USER_SEARCH_BASE": "without a DN template: where users are searched",
    "LDAP_USER_FILTER": "the user search filter (the library escapes the value)",
    "LDAP_GROUP_SEARCH_BASE": "where groups are searched (unset: no groups, so no teams)",
    "LDAP_GROUP_FILTER": "the group search filter",
    "LDAP_SLURM_USERNAME_ATTR": "the LDAP attribute holding the user's Slurm user name",
    "OIDC_RP_CLIENT_ID": "turns OIDC sign-in on: the portal's client id at the provider",
    "OIDC_RP_CLIENT_SECRET": "the client secret",
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "the provider's authorization endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "the provider's token endpoint",
    "OIDC_OP_USER_ENDPOINT": "the provider's userinfo endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "the provider's signing keys (tokens are checked with them)",
    "OIDC_RP_SIGN_ALGO": "the ID token's signature algorithm (asymmetric only)",
    "OIDC_RP_SCOPES": "scopes asked for",
    "OIDC_TIMEOUT": "seconds per request to the provider",
    "OIDC_RENEW_SECONDS": "how often a signed-in session is re-checked with the provider, so a "
                          "disabled account stops working within this time",
    "OIDC_PROVIDER_NAME": "the provider's name on the sign-in button",
    "OIDC_USERNAME_CLAIM": "the claim that becomes the portal user name",
    "OIDC_GROUPS_CLAIM": "the claim listing the user's groups (for `SSO_TEAM_GROUPS`)",
    "OIDC_SLURM_USERNAME_CLAIM": "the claim holding the Slurm user name (empty: the user name)",
    "SESSION_IDLE_TIMEOUT": "seconds without a request that end a session "
                            "(apps/core/sessions.py)",
    "SESSION_ABSOLUTE_TIMEOUT": "seconds after sign-in that end a session however active it is; "
                                "the cookie dies then too",
    "LOGIN_FAILURE_LIMIT": "failed sign-ins for one (user name, address) pair that lock that "
                           "pair out (never the user name alone: anyone could lock a colleague "
                           "out)",
    "LOGIN_LOCKOUT_MINUTES": "how long such a lockout lasts",
    "SSO_ADMIN_GROUPS": "directory groups whose members are platform admins (`is_staff`); "
                        "others are not",
    "EMAIL_PORT": "SMTP submission port",
    "EMAIL_HOST_USER": "SMTP user name",
    "EMAIL_HOST_PASSWORD": "SMTP password",
    "EMAIL_USE_TLS": "STARTTLS on the SMTP connection",
    "EMAIL_TIMEOUT": "seconds per SMTP connection",
    "DEFAULT_FROM_EMAIL": "the sender of every message",
    "TRACE_STRAGGLER_MIN_EXCESS_PCT": "the same floor as a share (%) of the median step",
    "TRACE_COLLECT_SETTLE_S": "seconds a trace file must be unchanged before it is collected "
                              "(the profiler may still be writing it)",
    "SECURITY_LOOKBACK_MINUTES": "telemetry read before each window",
    "SECURITY_WEBHOOK_URL": "where findings are posted as JSON",
    "SLO_WEBHOOK_URL": "a Slack or Mattermost incoming webhook for breaches and fast burns",
    "SLO_WEBHOOK_FORMAT": "`slack` (`<url|text>` links) or `mattermost` (`[text](url)`, a user "
                          "name)",
    "METRICS_ALLOWED_IPS": "addresses or CIDRs allowed to read `/metrics` without the token",
    "WORKER_METRICS_ADDRESS": "where the worker's metrics are served",
    "TIME_ZONE": "the portal's time zone for dates shown without a cluster's own",
    "STATIC_ROOT": "where `collectstatic` writes the static files",
    "REDIS_URL": "Redis as Celery's broker and the cache; unset: tasks run in-process (eager) "
                 "and the cache is local memory",
    "TASK_RUN_KEEP_DAYS": "finished run records older than this are deleted (daily)",
    "PROMETHEUS_URL": "the default Prometheus of clusters set up from the environment (`manage.py "
                      "setup_cluster`); each Cluster row keeps its own copy, editable in the admin",
    "SLURM_FILES_DIR": "the `files` backend's folder of saved command output (for `manage.py "
                       "setup_cluster`)",
    "SLURM_REST_TOKEN_FILE": "a JWT from `scontrol token` for the `rest` backend (re-read each "
                             "time a client is built, so it can be rotated)",
    "SLURM_SYNC_OVERLAP": "seconds re-read behind the sync's watermark (slurmdbd lags slurmctld)",
    "SLURM_SYNC_INITIAL_DAYS": "days of history the first sync reads",
    "SLURM_SYNC_SETTLE": "seconds Slurm's job counters must stay still before a sync may be "
                         "skipped",
    "SLURM_SYNC_BATCH": "records per transaction (syncs)",
    "SLURM_IMPORT_BATCH": "records per transaction (`import_sacct`)",
    "PROMETHEUS_TIMEOUT": "seconds per Prometheus query",
    "SLURM_BACKEND": "how clusters set up from the environment read Slurm",
    "SLURM_CLUSTER": "the Slurm ClusterName of the cluster set up from the environment",
    "SLURM_REST_URL": "slurmrestd's address (the `rest` backend)",
    "SLURM_TIMEOUT": "seconds per Slurm command or request",
    "SLURM_REST_USER": "the `X-SLURM-USER-NAME` of REST requests",
    "SLURM_REST_VERSION": "slurmrestd's API version (data_parser); empty: the newest the "
                          "server serves",
    "SLURM_SYNC_FULL_EVERY": "seconds: a full job sync at least this often, even when "
                             "Slurm's counters did not move",
    "SLURM_SYNC_CLAIM_EXPIRY": "seconds: a sync claim older than this is taken over (its worker "
                               "died)",
    "JOB_LABEL_RULES": "the job-label rules file (AI frameworks from batch scripts)",
    "QUOTA_WEBHOOK_URL": "where quota warnings are posted (JSON with a `text` field)",
    "QUOTA_WEBHOOK_TIMEOUT": _WEBHOOK_TIMEOUT,
    "TRACE_MAX_FILE_MB": "largest trace file read",
    "TRACE_MAX_DECOMPRESSED_MB": "largest trace after decompression (gzip bombs stop here)",
    "TRACE_UPLOAD_MAX_FILES": "files per upload request (one per rank)",
    "SECURITY_MAX_CATCHUP_HOURS": "how far back a scheduled run reaches after an outage",
    "SECURITY_CLAIM_EXPIRY": "seconds: a detection claim older than this is taken over",
    "SECURITY_SCRIPT_BATCH": "job scripts read per scheduled run",
    "SECURITY_SCRIPT_LOOKBACK_DAYS": "how far back job scripts are read",
    "SECURITY_WEBHOOK_TIMEOUT": _WEBHOOK_TIMEOUT,
    "SECURITY_PROBE_TIMEOUT": "seconds per probe",
    "SECURITY_PROBE_PER_SECOND": "probes per second",
    "SLO_WEBHOOK_TIMEOUT": _WEBHOOK_TIMEOUT,
    "GUARDRAILS_WEBHOOK_TIMEOUT": _WEBHOOK_TIMEOUT,
    "GUARDRAILS_POLICY_IDLE_MINUTES": "idle time (minutes) that starts the idle-job policy: a "
                                      "warning, then the cancel after the grace period",
    "GUARDRAILS_POLICY_GRACE_MINUTES": "minutes between the policy's warning and its cancel",
    "LOG_LEVEL": "level of the `beacon` and `apps` loggers",
    "PROMETHEUS_MULTIPROC_DIR": "prometheus-client's folder for counters shared by several "
                                "processes (gunicorn workers, a Celery worker's children): set it "
                                "to an empty folder, and `/metrics` adds them up",
    "BEACON_NO_FORK": "set (to anything): the work `apps/core/batch.py` would give a forked "
                      "child (parsing while storing, telemetry files) runs in this process",
}


@dataclass
class Variable:
    name: str
    kind: str
    default: str
    section: str
    order: tuple[int, int]
    settings: list[str] = field(default_factory=list)
    effects: list[str] = field(default_factory=list)
    where: str = ""

    @property
    def effect(self) -> str:
        text = NOTES.get(self.name) or "; ".join(self.effects)
        named = [s for s in self.settings if s != self.name]
        if named:
            text += f" (setting {', '.join(f'`{s}`' for s in named)})"
        return text


class _Source:
    """One Python file: its tree, its lines, its comments and its section headers."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.text = path.read_text()
        self.lines = self.text.splitlines()
        self.tree = ast.parse(self.text, filename=str(path))
        self.comments: dict[int, str] = {}  # line -> comment text
        self.comment_only: set[int] = set()
        for tok in tokenize.generate_tokens(io.StringIO(self.text).readline):
            if tok.type == tokenize.COMMENT:
                row = tok.start[0]
                self.comments[row] = tok.string.lstrip("#").strip()
                if not self.lines[row - 1][:tok.start[1]].strip():
                    self.comment_only.add(row)
        self.sections = {row: m[1] for row in sorted(self.comment_only)
                         if (m := _SECTION.match(self.lines[row - 1].strip()))}

    def section_at(self, row: int) -> tuple[int, str]:
        above = [r for r in self.sections if r <= row]
        return (max(above), self.sections[max(above)]) if above else (0, "")

    def comment_above(self, row: int, paragraph: bool) -> str:
        """The comment block right above ``row``; with ``paragraph``, the nearest one above it
        in its paragraph (lines of code between, no blank line or section line)."""
        block: list[str] = []
        r = row - 1
        while r >= 1 and self.lines[r - 1].strip() and r not in self.sections:
            if r in self.comment_only:
                block.insert(0, self.comments[r])
            elif block or not paragraph:
                break
            r -= 1
        return " ".join(block)

    def inline_comment(self, node: ast.stmt | ast.expr) -> str:
        rows = range(node.lineno, (node.end_lineno or node.lineno) + 1)
        text = [self.comments[r] for r in rows if r in self.comments and r not in self.comment_only]
        return " ".join(t for t in text if not t.startswith("noqa"))

    def segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or ""


def _calls(src: _Source) -> list[tuple[ast.Call, str, ast.stmt | None, str]]:
    """Reader calls with a literal name: (call, reader, enclosing statement, function name)."""
    found: list[tuple[ast.Call, str, ast.stmt | None, str]] = []

    def visit(node: ast.AST, stmt: ast.stmt | None, func: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef):
                visit(child, None, child.name)
                continue
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and (
                    child.func.id in READERS and child.args
                    and isinstance(child.args[0], ast.Constant)
                    and isinstance(child.args[0].value, str)):
                found.append((child, child.func.id, stmt, func))
            simple = isinstance(child, ast.stmt) and not hasattr(child, "body")
            inner = child if isinstance(child, ast.stmt) and stmt is None and simple else stmt
            visit(child, inner, func)

    visit(src.tree, None, "")
    return found


_CHECKOUT = re.compile(r'^str\(BASE_DIR / "([^"]+)"\)$')


def _default(src: _Source, call: ast.Call, reader: str) -> str:
    node = call.args[1] if len(call.args) > 1 else next(
        (k.value for k in call.keywords if k.arg == "default"), None)
    if node is None or reader == "_required":  # _required's second argument is a hint
        return "—"
    if match := _CHECKOUT.match(src.segment(node)):
        return f"`{match[1]}` in the checkout"
    if not any(isinstance(n, ast.Name | ast.Call | ast.Attribute) for n in ast.walk(node)):
        value = eval(compile(ast.Expression(node), "<default>", "eval"), {"__builtins__": {}})  # noqa: S307  constants and operators only
        if isinstance(value, bool):
            return "`true`" if value else "`false`"
        return f"`{value}`" if value != "" else "—"
    return f"`{src.segment(node)}`"


def _kind(src: _Source, call: ast.Call, reader: str) -> str:
    kind = READERS[reader]
    minimum = next((k.value for k in call.keywords if k.arg == "minimum"), None)
    if minimum is not None:
        kind += f" ≥ {src.segment(minimum)}"
    if reader == "env_choice" and len(call.args) > 2:
        choices = ast.literal_eval(call.args[2]) if isinstance(call.args[2], ast.Tuple) else ()
        kind += " " + ", ".join(f"`{c}`" for c in choices)
    return kind


def _beat_entry(src: _Source, call: ast.Call) -> str:
    """For a cadence inside ``CELERY_BEAT_SCHEDULE``: which entry it times."""
    for node in ast.walk(src.tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if (isinstance(key, ast.Constant) and isinstance(value, ast.Dict)
                        and any(n is call for n in ast.walk(value))
                        and any(isinstance(k, ast.Constant) and k.value == "task"
                                for k in value.keys)):
                    return f"seconds between runs of beat's `{key.value!s}`"
    return ""


def _targets(stmt: ast.stmt | None) -> list[str]:
    if isinstance(stmt, ast.Assign):
        return [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    if isinstance(stmt, ast.AnnAssign | ast.AugAssign) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    return []


def _helper_sites(settings: _Source) -> dict[str, int]:
    """Where settings.py first calls each helper function: its line."""
    sites: dict[str, int] = {}
    for node in ast.walk(settings.tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            sites[node.func.id] = min(sites.get(node.func.id, node.lineno), node.lineno)
    return sites


def collect() -> list[Variable]:
    """Every variable read through the readers, in settings.py's order, then direct reads."""
    settings = _Source(SETTINGS)
    sites = _helper_sites(settings)
    found: dict[str, Variable] = {}
    for src in (settings, *(_Source(p) for p in HELPERS)):
        for call, reader, stmt, func in _calls(src):
            name = call.args[0].value  # type: ignore[attr-defined]
            row = call.lineno if src is settings else sites.get(func, 0)
            _, section = settings.section_at(row)
            effect = " — ".join(t for t in (_beat_entry(src, call), src.inline_comment(call),
                                             src.comment_above(call.lineno,
                                                               paragraph=src is settings)) if t)
            var = found.setdefault(name, Variable(
                name, _kind(src, call, reader), _default(src, call, reader), section,
                (row, call.lineno if src is settings else 10_000 + call.lineno),
                where=f"{src.path.relative_to(ROOT)}:{call.lineno}"))
            if var.default == "—":
                var.default = _default(src, call, reader)
            var.settings += [t for t in _targets(stmt) if src is settings and t not in var.settings]
            if effect and effect not in var.effects:
                var.effects.append(effect)
    ordered = sorted(found.values(), key=lambda v: v.order)
    return ordered + _direct_reads(set(found))


_DIRECT = re.compile(r"os\.(?:environ\.get|getenv)\(\s*\"([A-Z][A-Z0-9_]*)\"")


def _direct_reads(known: set[str]) -> list[Variable]:
    """Variables code reads itself (``os.environ.get("NAME")``), outside the settings."""
    out: dict[str, Variable] = {}
    for root in DIRECT_ROOTS:
        for path in sorted(root.rglob("*.py")):
            if path in (SETTINGS, *HELPERS, Path(__file__).resolve()) or "migrations" in path.parts:
                continue
            for lineno, line in enumerate(path.read_text().splitlines(), 1):
                for name in _DIRECT.findall(line):
                    if name not in known and name not in out:
                        out[name] = Variable(name, "text", "—", "Read outside the settings",
                                             (1_000_000, len(out)),
                                             where=f"{path.relative_to(ROOT)}:{lineno}")
    return list(out.values())


HEADER = """# Configuration reference

Generated by `python -m portal.reference` from `portal/settings.py`, `portal/env.py` and
`portal/sso.py`: do not edit it by hand (`tests/core/test_configuration.py` fails when it is
out of date). Effects are the comments above each variable in those files.

Beacon reads its whole configuration from the environment, in one settings module. With
nothing set it runs the embedded default: SQLite in `data/`, Celery tasks in-process, no
Prometheus, no Slurm (imports only). A bad value stops start-up with a message naming the
variable; other problems are system checks (`manage.py check`). Any text variable `NAME` can
also be given as `NAME_FILE`, the path of a file holding the value (for secrets).
`deploy/beacon.env.example` is a starting point for docker-compose.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip()


def _shorten_repeats(variables: list[Variable]) -> None:
    """A paragraph's comment is printed once, at its first variable; the others point there."""
    first: dict[str, str] = {}
    for var in variables:
        if var.name in NOTES:
            continue
        kept = []
        for effect in var.effects:
            head, _, tail = effect.rpartition(" — ") if " — " in effect else ("", "", effect)
            if tail in first and first[tail] != var.name:
                tail = f"see `{first[tail]}`"
            else:
                first.setdefault(tail, var.name)
            kept.append(f"{head} — {tail}" if head else tail)
        var.effects = kept


def render(variables: list[Variable]) -> str:
    _shorten_repeats(variables)
    out = [HEADER, f"{len(variables)} variables.\n"]
    section = None
    for var in variables:
        if var.section != section:
            section = var.section
            out.append(f"\n## {section or 'Start-up'}\n")
            out.append("| variable | default | type | effect |\n|---|---|---|---|")
        out.append(f"| `{var.name}` | {_cell(var.default)} | {_cell(var.kind)} | "
                   f"{_cell(var.effect)} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when docs/CONFIGURATION.md is out of date")
    args = parser.parse_args(argv)
    text = render(collect())
    shown = OUTPUT.relative_to(ROOT) if OUTPUT.is_relative_to(ROOT) else OUTPUT
    if args.check:
        current = OUTPUT.read_text() if OUTPUT.exists() else ""
        if current != text:
            print(f"{shown} is out of date: run python -m portal.reference", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
