"""``manage.py telemetry_store``: list, add or update, and remove a cluster's telemetry stores.

    manage.py telemetry_store <cluster> --list
    manage.py telemetry_store <cluster> <name> --url http://prom-b:9090 --hosts 'gpu-b*' \
        [--partitions inference] [--kind victoriametrics] [--order 1] [--header K=V]
    manage.py telemetry_store <cluster> <name> --remove

Nodes no store claims stay with the cluster's own Prometheus URL (docs/metrics.md, "Several
stores per cluster"). Idempotent: adding a store that exists updates it.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.clusters.models import Cluster, TelemetryStore


def _headers(pairs: list[str]) -> dict[str, str]:
    found = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise CommandError(f"--header {pair!r}: give NAME=VALUE")
        found[name.strip()] = value.strip()
    return found


class Command(BaseCommand):
    help = "List, add or update, and remove the telemetry stores of a cluster."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("cluster")
        parser.add_argument("name", nargs="?")
        parser.add_argument("--list", action="store_true")
        parser.add_argument("--remove", action="store_true")
        parser.add_argument("--url")
        parser.add_argument("--kind", choices=TelemetryStore.Kind.values)
        parser.add_argument("--hosts", nargs="*", help="host-name globs")
        parser.add_argument("--partitions", nargs="*")
        parser.add_argument("--order", type=int)
        parser.add_argument("--header", action="append", default=[])

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            cluster = Cluster.objects.get(name=options["cluster"])
        except Cluster.DoesNotExist:
            raise CommandError(f"no cluster {options['cluster']!r}") from None
        if options["list"] or not options["name"]:
            self._list(cluster)
        elif options["remove"]:
            deleted, _ = TelemetryStore.objects.filter(cluster=cluster,
                                                       name=options["name"]).delete()
            if not deleted:
                raise CommandError(f"cluster {cluster.name} has no store {options['name']!r}")
            self.stdout.write(f"store {options['name']} removed")
        else:
            self._save(cluster, options)

    def _list(self, cluster: Cluster) -> None:
        for s in cluster.telemetry_stores.all():
            self.stdout.write(f"{s.order:>3} {s.name} {s.kind} {s.url} hosts={s.hosts} "
                              f"partitions={s.partitions}")
        self.stdout.write(f"default {cluster.metrics_url or '(none)'}: every other node")

    def _save(self, cluster: Cluster, options: dict[str, Any]) -> None:
        store = TelemetryStore.objects.filter(cluster=cluster, name=options["name"]).first() \
            or TelemetryStore(cluster=cluster, name=options["name"])
        for field in ("url", "kind", "hosts", "partitions", "order"):
            if options[field] is not None:
                setattr(store, field, options[field])
        if options["header"]:
            store.headers = _headers(options["header"])
        if not store.url:
            raise CommandError("--url is required for a new store")
        try:
            store.full_clean()
        except ValidationError as exc:
            raise CommandError(f"store {store.name}: {'; '.join(exc.messages)}") from None
        created = store.pk is None
        store.save()
        self.stdout.write(f"store {store.name} {'created' if created else 'updated'}")
