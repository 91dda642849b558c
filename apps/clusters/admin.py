from django.contrib import admin

from apps.clusters.models import Cluster, Node, Partition, SlurmAccount, TelemetryStore


class TelemetryStoreInline(admin.TabularInline):
    """The cluster's other stores (issue 29): each claims nodes by host glob or partition."""

    model = TelemetryStore
    extra = 0
    fields = ["name", "url", "kind", "hosts", "partitions", "order", "headers"]


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    inlines = [TelemetryStoreInline]
    list_display = ["name", "display_name", "slurm_backend", "prometheus_url", "is_simulated",
                    "sync_state", "last_sync_ok_at"]
    readonly_fields = ["sync_state", "sync_claimed_at", "sync_watermark", "last_sync_ok_at",
                       "last_sync_error"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "gpu_type", "gpu_count", "state"]
    list_filter = ["cluster", "gpu_type", "state"]
    search_fields = ["name"]


@admin.register(Partition)
class PartitionAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "is_default", "max_time_min", "state"]
    list_filter = ["cluster"]


@admin.register(SlurmAccount)
class SlurmAccountAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "team"]
    list_filter = ["cluster", "team"]
