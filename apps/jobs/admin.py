from typing import Any

from django.contrib import admin

from apps.analysis.diagnosis import FACTS
from apps.jobs.models import (
    DiagnosisCondition,
    DiagnosisRule,
    Job,
    JobFinding,
    JobGpu,
    JobMetrics,
)


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """Read-only: jobs come from Slurm through the sync, never from hand edits."""

    list_display = ["display_id", "cluster", "name", "user_name", "account", "state",
                    "gpus", "submit_time"]
    list_filter = ["cluster", "state"]
    search_fields = ["=job_id", "name", "user_name"]
    show_full_result_count = False  # a COUNT(*) over millions of jobs per page view is waste

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(JobGpu)
class JobGpuAdmin(admin.ModelAdmin):
    list_display = ["job", "node", "gpu_index", "start", "end"]
    raw_id_fields = ["job"]


@admin.register(JobMetrics)
class JobMetricsAdmin(admin.ModelAdmin):
    """Read-only: written by the archive service (``manage.py archive_jobs`` re-does one)."""

    list_display = ["job", "status", "measure", "binding", "useful_hours",
                    "allocated_gpu_hours", "computed_at", "last_error_at"]
    list_filter = ["status", "measure"]
    raw_id_fields = ["job"]
    show_full_result_count = False

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False


# --- Diagnosis rules: data admins edit ---------------------------------------------------------


class DiagnosisConditionInline(admin.TabularInline):
    model = DiagnosisCondition
    extra = 1


@admin.register(DiagnosisRule)
class DiagnosisRuleAdmin(admin.ModelAdmin):
    """Edit what the job pages say and whom they send people to. A change applies to jobs
    diagnosed afterwards; ``manage.py diagnose_jobs`` re-runs older ones."""

    list_display = ["title", "key", "area", "severity", "contact", "enabled", "order",
                    "conditions_text"]
    list_editable = ["enabled", "order"]
    list_filter = ["area", "severity", "enabled"]
    search_fields = ["key", "title", "text"]
    inlines = [DiagnosisConditionInline]
    fields = ["key", "title", "area", "severity", "text", "hint", "contact", "enabled", "order",
              "placeholders"]
    readonly_fields = ["placeholders"]

    @admin.display(description="conditions (all must hold)")
    def conditions_text(self, rule: DiagnosisRule) -> str:
        return " and ".join(str(c) for c in rule.conditions.all())

    @admin.display(description="facts you may cite as {name}")
    def placeholders(self, rule: DiagnosisRule) -> str:
        return ", ".join(f"{{{name}}}" for name in FACTS)

    def get_queryset(self, request: Any) -> Any:
        return super().get_queryset(request).prefetch_related("conditions")


@admin.register(JobFinding)
class JobFindingAdmin(admin.ModelAdmin):
    """Read-only: written by the diagnosis (and later the security rules)."""

    list_display = ["job", "title", "area", "severity", "route", "contact", "created_at"]
    list_filter = ["source", "area", "severity", "key"]
    raw_id_fields = ["job"]
    show_full_result_count = False

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False
