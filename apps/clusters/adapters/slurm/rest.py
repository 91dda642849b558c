"""The ``rest`` Slurm backend: slurmrestd with a JWT, at any API version from v0.0.37 (Slurm
21.08/22.05) to v0.0.45 (26.05) (``versions.DATA_PARSERS``: the rows with ``rest``).

Bodies have the shape of ``sacct/squeue --json`` at the same version and go through the same
parsers. With no ``version`` set the backend asks the server which versions it serves
(``GET /openapi/v3``, remembered per URL for an hour) and speaks the newest one Beacon
reads; a version set that the server does not serve is refused by the server (HTTP 404).

Options (``Cluster.slurm_settings``): ``url`` ("http://127.0.0.1:6820"), ``user`` (the
``X-SLURM-USER-NAME``), ``token`` or ``token_file`` (a JWT from ``scontrol token``; the file
is read each time a client is built, so it can be rotated), ``version`` ("v0.0.42"; empty:
the newest the server offers), ``timeout`` (seconds, default 30), ``cluster`` (restricts
slurmdbd queries to one cluster: without it slurmdbd answers for every cluster it knows).

What each version can do (``versions.RestFeatures``; ``cannot`` says it before a button is
pressed): fairshare (``/slurm/<v>/shares``), batch scripts (``show_batch_script``) and limit
writes that change only what they name exist from v0.0.40 (Slurm 23.11); 22.05's v0.0.37/38
have none of them. No version has sreport's usage report or a stored job environment.
Exit codes: 22.05's slurmdbd JSON gets non-zero exits wrong, so for v0.0.37/38
``exit_codes`` reads slurmctld's raw wait status, which exists only while the job is still
in slurmctld's memory (``MinJobAge``, 300 s by default); later versions are right as they are.
v0.0.37's job records give the eligible time as ``start``: the start is rebuilt from
``elapsed`` (``_start_from_elapsed``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import requests
from requests.adapters import HTTPAdapter

from apps.clusters.adapters.slurm import parse, parse_gpus, parse_live, values, versions
from apps.clusters.adapters.slurm import parse_cluster as cparse
from apps.clusters.adapters.slurm import types as st
from apps.clusters.adapters.slurm.rest_limits import limit_body
from apps.clusters.adapters.slurm.versions import DataParser, RestFeatures
from apps.core.errors import AdapterError, TransientAdapterError

_ID_CHUNK = 200
Params = Mapping[str, str] | Sequence[tuple[str, str]] | None
_TRANSIENT_STATUS = {500, 502, 503, 504}  # slurmrestd answers 500 when slurmctld/dbd is down
DETECT_FOR = 3600.0  # seconds a server's detected API version is remembered
DETECT_RETRY = 60.0  # seconds before a server that could not be asked is asked again
_detected: dict[str, tuple[float, str]] = {}  # url -> (when, version; "" when it failed)
_detect_lock = threading.Lock()


def _start_from_elapsed(now: float, rec: dict[str, Any]) -> None:
    """dbv0.0.37's start for a job that started: its end (or, still running, the time of the
    answer) minus the elapsed and suspended seconds, which slurmdbd computes from the true
    start. Exact for finished jobs (a job cancelled before it started gets start = end, as
    sacct prints it); within a second for running ones. A pending job keeps no start."""
    times = rec.get("time")
    if not isinstance(times, dict):
        return
    end, elapsed, suspended = times.get("end"), times.get("elapsed"), times.get("suspended")
    if type(elapsed) is not int:
        return
    held = suspended if type(suspended) is int else 0
    if type(end) is int and end > 0:
        times["start"] = end - elapsed - held
    elif times.get("start"):  # running (or suspended): the eligible time stands in for it
        times["start"] = round(now) - elapsed - held


def _read_token(options: Mapping[str, Any]) -> str:
    if options.get("token"):
        return str(options["token"]).strip()
    token_file = options.get("token_file")
    if not token_file:
        raise AdapterError("slurmrestd needs a token or token_file", service="slurm")
    try:
        text = Path(str(token_file)).read_text().strip()
    except OSError as exc:
        raise AdapterError(f"cannot read token_file {token_file}: {exc}", service="slurm") from exc
    return text.removeprefix("SLURM_JWT=")  # `scontrol token` prints SLURM_JWT=...


def _cannot(parser: DataParser) -> dict[st.Action, str]:
    """What this API version cannot do, in the words the pages show before a button."""
    features = parser.rest or RestFeatures()
    old = f"slurmrestd's API {parser.name} (Slurm {parser.releases[-1]})"
    out = {st.Action.RECONCILE: "slurmrestd has no usage report (sreport): reconcile with the "
                                "cli backend"}
    if not features.limits_write:
        out[st.Action.QUOTA_WRITE] = (f"quota writes need the cli backend (sacctmgr) or "
                                      f"Slurm 23.11+: {old} would rewrite the whole association")
        out[st.Action.QUOTA_PREVIEW] = (f"{old} cannot rehearse a limit change: previews and "
                                        "quota writes need the cli backend")
    return out


@dataclass
class SlurmRest:
    """Talks to slurmrestd over HTTP with a JWT (see the module docstring)."""

    url: str
    user: str
    token: str
    version: str = ""  # "": the newest the server serves (detected once, remembered)
    timeout: float = 30.0
    cluster: str = ""

    def __post_init__(self) -> None:
        if self.version:
            self._set_version(self.version)
        self.session = requests.Session()
        # No library retries: Celery retries the whole task with backoff.
        self.session.mount("http://", HTTPAdapter(max_retries=0))
        self.session.mount("https://", HTTPAdapter(max_retries=0))
        self.session.headers.update({"X-SLURM-USER-NAME": self.user,
                                     "X-SLURM-USER-TOKEN": self.token})

    def _set_version(self, name: str) -> None:
        parser = versions.get(name)
        if parser.rest is None:
            raise AdapterError(f"slurmrestd version {name!r} is not one Beacon speaks over "
                               f"REST (it speaks {_rest_names()})", service="slurm")
        self.parser, self.version = parser, parser.name
        self.slurm, self.slurmdb = f"/slurm/{parser.name}", f"/slurmdb/{parser.name}"

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SlurmRest:
        if not options.get("url"):
            raise AdapterError("slurmrestd needs a url", service="slurm")
        return cls(url=str(options["url"]).rstrip("/"), user=str(options.get("user", "")),
                   token=_read_token(options), version=str(options.get("version") or ""),
                   timeout=float(options.get("timeout", 30)),
                   cluster=str(options.get("cluster", "")))

    # --- which API version ------------------------------------------------------------

    def api(self) -> DataParser:
        """The version spoken: the one set, else the newest the server serves."""
        if not self.version:
            self._set_version(self._detect())
        return self.parser

    def _detect(self) -> str:
        """The newest version both sides speak, from ``/openapi/v3``'s paths (remembered
        per URL for ``DETECT_FOR`` seconds: the document is megabytes). A failed attempt is
        remembered for ``DETECT_RETRY`` seconds, so pages asking ``cannot`` of a server that
        is down do not each wait for it."""
        with _detect_lock:
            when, found = _detected.get(self.url, (0.0, ""))
        age = time.monotonic() - when
        if found and age < DETECT_FOR:
            return found
        if when and not found and age < DETECT_RETRY:
            raise TransientAdapterError(f"slurmrestd at {self.url} did not say which API "
                                        "versions it serves (tried less than a minute ago)",
                                        service="slurm")
        try:
            spec = self._json("/openapi/v3", check_errors=False)
            found = versions.newest_served(spec.get("paths") or {}).name
        finally:
            with _detect_lock:
                _detected[self.url] = (time.monotonic(), found)
        return found

    # --- HTTP --------------------------------------------------------------------------

    def _request(self, method: str, path: str, params: Params = None,
                 body: Any = None, stream: bool = False) -> requests.Response:
        try:
            return self.session.request(method, f"{self.url}{path}", params=params,
                                        json=body, stream=stream,
                                        timeout=(min(self.timeout, 10), self.timeout))
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise TransientAdapterError(f"slurmrestd unreachable at {self.url}: {exc}",
                                        service="slurm") from exc
        except requests.RequestException as exc:
            raise AdapterError(f"slurmrestd request failed: {exc}", service="slurm") from exc

    def _get(self, path: str, params: Params = None,
             stream: bool = False) -> requests.Response:
        resp = self._request("GET", path, params, stream=stream)
        if resp.status_code != 200:
            self._fail(path, resp)
        return resp

    @staticmethod
    def _fail(path: str, resp: requests.Response) -> None:
        body = resp.text[:2000]
        message = f"slurmrestd {path} answered HTTP {resp.status_code}: {body[:200].strip()}"
        if resp.status_code in (401, 403):
            message = f"slurmrestd refused the token (HTTP {resp.status_code}): check user/token"
        elif resp.status_code == 404 and "/v0.0." in path:
            message = (f"slurmrestd does not serve {path} (HTTP 404): set no version to use "
                       "the newest it offers")
        transient = resp.status_code in _TRANSIENT_STATUS and "Unable to parse" not in body
        error = TransientAdapterError if transient else AdapterError
        raise error(message, service="slurm", detail=body)

    def _json(self, path: str, params: Params = None,
              check_errors: bool = True) -> dict[str, Any]:
        return self._decoded(path, self._get(path, params), check_errors)

    def _decoded(self, path: str, resp: requests.Response,
                 check_errors: bool = True) -> dict[str, Any]:
        try:
            data = resp.json()
        except ValueError as exc:
            raise AdapterError(f"slurmrestd {path} sent invalid JSON", service="slurm",
                               detail=resp.text[:2000]) from exc
        if not isinstance(data, dict):
            raise AdapterError(f"slurmrestd {path} sent JSON that is not an object",
                               service="slurm")
        if check_errors:
            self._raise_errors(path, data.get("errors"))
        return data

    @staticmethod
    def _raise_errors(path: str, errors: Any) -> None:
        errors = values.failures(errors)
        if errors:
            text = json.dumps(errors)[:2000]
            raise TransientAdapterError(f"slurmrestd {path} reported errors: {text[:200]}",
                                        service="slurm", detail=text)

    def _query(self, **params: str | Sequence[str]) -> list[tuple[str, str]]:
        """Query parameters, lists written the way this version reads them (comma-joined
        for 22.05, the key repeated from 23.02), the cluster added when set."""
        features = self.api().rest or RestFeatures()
        out: list[tuple[str, str]] = []
        for key, value in params.items():
            if isinstance(value, str):
                out.append((key, value))
            elif features.repeat_lists:
                out.extend((key, item) for item in value)
            else:
                out.append((key, ",".join(value)))
        if self.cluster:
            out.append(("cluster", self.cluster))
        return out

    def _stream_jobs(self, params: list[tuple[str, str]],
                     ) -> Iterator[st.SlurmJob | st.RecordError]:
        """Stream ``/slurmdb/<v>/jobs`` through the sacct parser (bounded memory).

        slurmrestd answers 200 with an ``errors`` list when slurmdbd fails behind it (and
        sometimes no jobs at all): that is a failed read, never an empty window. Errors
        sent before the jobs stop the stream at once; errors after them fail it at the end.
        """
        # steps are read, as sacct --json gives them: MaxRSS (the memory peak) is in them
        parser = self.api()
        path = f"{self.slurmdb}/jobs"
        members: dict[str, Any] = {}
        with self._get(path, params, stream=True) as resp:
            resp.raw.decode_content = True
            prepare = partial(_start_from_elapsed, time.time()) \
                if parser.start_is_eligible else None
            for item in parse.iter_sacct_json(resp.raw, members, prepare, parser=parser):
                self._raise_errors(path, members.get("errors"))
                yield item
        self._raise_errors(path, members.get("errors"))
        if "jobs" not in members:
            raise TransientAdapterError(f"slurmrestd {path} sent no job list",
                                        service="slurm")

    # --- the SlurmClient interface -------------------------------------------------------

    def change_marker(self) -> str:
        self.api()
        try:
            return cparse.diag_marker(self._json(f"{self.slurm}/diag"))
        except ValueError as exc:
            raise AdapterError(f"slurmrestd diag: {exc}", service="slurm") from exc

    def jobs_since(self, since: datetime | None) -> Iterator[st.SlurmJob | st.RecordError]:
        # sacct-style times only (epoch gives HTTP 500); relative avoids time zones.
        if since is None:
            start = "2000-01-01T00:00:00"  # slurmrestd cannot parse 1970
        else:
            start = f"now-{max(0, int((datetime.now(tz=UTC) - since).total_seconds()))}seconds"
        features = self.api().rest or RestFeatures()
        window: dict[str, str | Sequence[str]] = {"start_time": start, "end_time": "now"}
        if features.window_states:
            window["state"] = features.window_states
        return self._stream_jobs(self._query(**window))

    def jobs_by_id(self, job_ids: Iterable[int]) -> Iterator[st.SlurmJob | st.RecordError]:
        ids = [int(i) for i in job_ids]
        for start in range(0, len(ids), _ID_CHUNK):
            chunk = ids[start:start + _ID_CHUNK]
            yield from self._stream_jobs(self._query(step=[str(i) for i in chunk]))

    def exit_codes(self, job_ids: Iterable[int]) -> dict[int, st.ExitStatus]:
        if self.api().exit_trusted:
            return {}  # the accounting records are right: nothing to fix
        wanted = {int(i) for i in job_ids}
        entries = parse.parse_squeue_json(self._json(f"{self.slurm}/jobs"))
        return {e.job_id: e.exit for e in entries if e.job_id in wanted and e.exit is not None}

    def queue(self) -> list[st.QueueEntry]:
        self.api()
        entries = parse.parse_squeue_json(self._json(f"{self.slurm}/jobs"))
        return [e for e in entries if e.state in st.ACTIVE_STATES]

    def gpu_bindings(self) -> list[st.GpuBinding]:
        self.api()
        return parse_gpus.bindings_from_squeue(self._json(f"{self.slurm}/jobs"))

    def nodes(self) -> list[st.SlurmNode]:
        self.api()
        return cparse.parse_sinfo_json(self._json(f"{self.slurm}/nodes"))

    def partitions(self) -> list[st.SlurmPartition]:
        self.api()
        return cparse.parse_rest_partitions(self._json(f"{self.slurm}/partitions"))

    def reservations(self) -> list[st.Reservation]:
        """``/slurm/<v>/reservations``: every version from v0.0.37."""
        self.api()
        return parse_live.parse_reservations_json(self._json(f"{self.slurm}/reservations"))

    def qos(self) -> list[st.Qos]:
        """``/slurmdb/<v>/qos``: every version from v0.0.37 (``QOS`` in 22.05's)."""
        self.api()
        return parse_live.parse_qos_json(self._json(f"{self.slurmdb}/qos"))

    def associations(self) -> list[st.Association]:
        return cparse.parse_rest_associations(self._associations())

    def _associations(self, account: str = "") -> dict[str, Any]:
        params = self._query(**({"account": account} if account else {}))
        return self._json(f"{self.slurmdb}/associations", params or None)

    def shares(self) -> list[st.ShareRow]:
        features = self.api().rest
        if features is None or not features.shares:
            raise AdapterError(f"fairshare (sshare) has no slurmrestd endpoint in API "
                               f"{self.version} (Slurm 24.05+ has one): use the cli backend "
                               "for shares", service="slurm")
        return cparse.parse_rest_shares(self._json(f"{self.slurm}/shares"))

    def job_scripts(self, job_ids: Iterable[int]) -> dict[str, str]:
        """Stored batch scripts, one request per job: slurmdbd's ``show_batch_script``
        fails (MySQL error 1054) when one request names several jobs (seen on 26.05.5).
        22.05's API has no scripts: no labels from REST there."""
        features = self.api().rest
        if features is None or not features.job_scripts:
            return {}
        out: dict[str, str] = {}
        for job_id in job_ids:
            data = self._json(f"{self.slurmdb}/jobs", self._query(
                step=str(int(job_id)), show_batch_script="true"))
            for rec in data.get("jobs") or []:
                script = rec.get("script")
                if isinstance(script, str) and script:
                    out[parse.parse_sacct_job(rec, self.parser).display_id] = script
        return out

    def job_environments(self, job_ids: Iterable[int]) -> dict[str, str]:
        raise AdapterError("slurmrestd returns no job environments (its job records have "
                           "none): use the cli backend (sacct --env-vars)", service="slurm")

    # --- chargeback and quotas ------------------------------------------------------------

    def account_limits(self, account: str) -> st.Association | None:
        rows = [a for a in cparse.parse_rest_associations(self._associations(account))
                if a.account == account and not a.user]
        return rows[0] if rows else None

    def usage_report(self, start: datetime, end: datetime, tres: str) -> list[st.UsageRow]:
        raise AdapterError(_cannot(self.api())[st.Action.RECONCILE], service="slurm")

    def job_allocations(self, start: datetime, end: datetime) -> list[st.JobAllocation]:
        raise AdapterError("slurmrestd cannot truncate jobs to a window (sacct -T): "
                           "reconcile with the cli backend", service="slurm")

    def set_account_limit(self, account: str, tres: str, minutes: int | None,
                          dry_run: bool = False) -> st.LimitChange:
        """Set (``None``: remove) the account's ``GrpTRESMins`` for ``tres``.

        slurmrestd replaces an association's whole ``max.tres`` with what a POST names
        (seen on 26.05.5: posting one GrpTRESMins entry cleared GrpTRES), so the current
        record is read and posted back with only this one entry changed (``rest_limits``).
        There is no dry run over REST: a preview is that body, unsent."""
        parser = self.api()
        why = _cannot(parser).get(st.Action.QUOTA_WRITE)
        if why:
            raise AdapterError(why, service="slurm")
        current = [a for a in self._associations(account).get("associations") or []
                   if a.get("account") == account and not a.get("user")]
        if not current:
            raise AdapterError(f"Slurm changed nothing: no account {account} in slurmdbd "
                               f"(slurmrestd would have created it)", service="slurm")
        body, said = limit_body(current[0], tres, minutes)
        path = f"{self.slurmdb}/associations"
        command = f"POST {path} {json.dumps(body, separators=(',', ':'))}"
        if dry_run:
            return st.LimitChange(command=command, applied=False, output=(
                f"{said} (not sent: slurmrestd has no dry run; this is the request Beacon "
                "would send)"))
        resp = self._request("POST", path, body=body)
        if resp.status_code != 200:
            self._fail(path, resp)
        data = self._decoded(path, resp, check_errors=False)
        if data.get("errors"):
            raise AdapterError(f"Slurm refused the limit: {json.dumps(data['errors'])[:300]}",
                               service="slurm", detail=json.dumps(data["errors"]))
        return st.LimitChange(command=command, output=said, applied=True)

    def cancel_job(self, job_id: int) -> None:
        """``DELETE /slurm/<version>/job/{id}`` (SIGKILL by default, as scancel)."""
        self.api()
        path = f"{self.slurm}/job/{int(job_id)}"
        resp = self._request("DELETE", path)
        if resp.status_code != 200:
            if _already_ended(resp.text):
                return  # ended meanwhile: nothing to cancel
            self._fail(path, resp)
        try:
            errors = resp.json().get("errors")
        except ValueError:
            errors = None
        if errors and not _already_ended(json.dumps(errors)):
            raise AdapterError(f"slurmrestd refused to cancel job {job_id}: "
                               f"{json.dumps(errors)[:200]}", service="slurm")

    def cannot(self, action: st.Action) -> str:
        try:
            parser = self.api()
        except AdapterError:
            return ""  # the server cannot be asked now: the action itself will say why
        return _cannot(parser).get(action, "")

    def accounted_until(self) -> datetime | None:
        return None


def _already_ended(text: str) -> bool:
    return "already completing or completed" in text or "Invalid job id" in text


def _rest_names() -> str:
    return ", ".join(p.name for p in versions.DATA_PARSERS.values() if p.rest is not None)
