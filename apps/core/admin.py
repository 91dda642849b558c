from django.contrib import admin

from apps.core.models import TaskRun


@admin.register(TaskRun)
class TaskRunAdmin(admin.ModelAdmin):
    list_display = ["id", "kind", "cluster", "target", "status", "started_at", "finished_at"]
    list_filter = ["kind", "status", "cluster"]
    readonly_fields = [f.name for f in TaskRun._meta.fields]

    def has_add_permission(self, request: object) -> bool:
        return False  # runs are recorded by runs.tracked_run(), never typed in
