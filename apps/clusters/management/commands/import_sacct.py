"""``manage.py import_sacct PATH|- --cluster NAME [--exit-codes FILE] [--scripts DIR]
[--data-parser VERSION]``: import a saved ``sacct --json`` dump through the same parser and
upsert as the live sync.

Prints the dump's Slurm JSON version, created / updated / skipped and every error with its
record; exits 1 when a record was rejected, and refuses the whole dump (exit 1, nothing
written) when Slurm's ``errors`` list is not empty, ``jobs`` is missing, or the data parser
version is unknown (``--data-parser`` names it for a dump without ``meta``). An implausible
record (more GPUs than the cluster has, an end before its start, times centuries away:
``apps/analysis/plausibility.py``) is not rejected: it is stored flagged, printed with its
reasons and kept out of chargeback and SLOs until an admin accepts it; alone it leaves the
exit status 0. ``--exit-codes`` takes a saved ``sacct -a -P -o JobIDRaw,ExitCode`` of the
same jobs, because Slurm 22.05's JSON reports exit 0 for jobs that failed with a non-zero code.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import InterfaceError, OperationalError

from apps.clusters.adapters.slurm.parse import parse_exit_codes
from apps.clusters.importer import ImportResult, import_sacct
from apps.clusters.labels import label_jobs_from_dir
from apps.clusters.models import Cluster
from apps.core.errors import AdapterError


class Command(BaseCommand):
    help = ("Import a sacct --json file (or - for stdin) into a cluster's job records. Exits 1 "
            "when records were rejected or the dump refused (Slurm errors, no jobs, an unknown "
            "version). Implausible records (more GPUs than the cluster has, "
            "an end before its start, times centuries away) are not rejected: they are stored "
            "flagged, listed, and kept out of chargeback and SLOs until an admin accepts them "
            "on the job page; they alone do not change the exit status.")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("path", help="sacct --json output, or - for stdin")
        parser.add_argument("--cluster", required=True, help="Beacon cluster name")
        parser.add_argument("--exit-codes", help="saved `sacct -a -P -o JobIDRaw,ExitCode`")
        parser.add_argument("--data-parser", help="the dump's Slurm JSON version (v0.0.37 "
                                                  "to v0.0.45) when its meta names none")
        parser.add_argument("--scripts", help="folder of saved batch scripts <job id>.sh: "
                                              "labels the jobs (launcher, parallelism, paths)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            cluster = Cluster.objects.get(name=options["cluster"])
        except Cluster.DoesNotExist:
            raise CommandError(f"no cluster named {options['cluster']!r}") from None
        codes = None
        if options["exit_codes"]:
            codes = parse_exit_codes(self._read_text(options["exit_codes"]))
        try:
            result = self._import(cluster, options["path"], codes, options["data_parser"])
        except AdapterError as exc:
            raise CommandError(f"{options['path']}: refused: {exc}") from None
        except (OperationalError, InterfaceError) as exc:
            raise CommandError(
                f"the database became unavailable during the import ({type(exc).__name__}: "
                f"{str(exc).strip()[:200]}). The batches written before it are kept; run the "
                "same import again once the database is back (it is idempotent).") from None
        self.stdout.write(f"{cluster.name}: Slurm JSON {result.data_parser}; created "
                          f"{result.created}, updated "
                          f"{result.updated}, skipped {result.skipped}, errors "
                          f"{result.error_count}")
        for message in result.warnings:
            self.stdout.write(f"  warning: {message}")
        if result.implausible:
            self.stdout.write(f"  implausible: {result.implausible} record(s) stored flagged "
                              "(not rejected; an admin accepts them on the job page)")
        for message in result.flagged:
            self.stdout.write(f"  flagged: {message}")
        if result.implausible > len(result.flagged):
            self.stdout.write(f"  ... and {result.implausible - len(result.flagged)} more")
        if options["scripts"]:
            stats = label_jobs_from_dir(cluster, Path(options["scripts"]))
            self.stdout.write(f"  labels: {stats['labelled']} of {stats['jobs']} jobs labelled")
        for message in result.errors:
            self.stderr.write(f"  error: {message}")
        if result.error_count > len(result.errors):
            self.stderr.write(f"  ... and {result.error_count - len(result.errors)} more")
        if result.error_count:
            raise CommandError(f"{result.error_count} record(s) rejected", returncode=1)

    @staticmethod
    def _import(cluster: Cluster, path: str, codes: Any, version: str | None) -> ImportResult:
        if path == "-":
            return import_sacct(cluster, sys.stdin.buffer, exit_codes=codes, data_parser=version)
        try:
            with open(path, "rb") as stream:
                return import_sacct(cluster, stream, exit_codes=codes, data_parser=version)
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None

    @staticmethod
    def _read_text(path: str) -> str:
        try:
            return Path(path).read_text()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None
