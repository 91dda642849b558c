"""Admin for security data: rules, allow-lists and advisories are edited here; findings
change through their lifecycle (the finding page or the API), inputs are read-only."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html

from apps.analysis.components import ALIASES
from apps.analysis.recurrence import iso_utc
from apps.analysis.security_rules import RULES
from apps.security.models import (
    Advisory,
    AllowListEntry,
    ComponentAlias,
    Finding,
    FindingEvent,
    IbStorageBaseline,
    NodeInventory,
    QuietSchedule,
    SecurityRule,
    ServiceProbe,
    SshAllowedSource,
    SshLogEvent,
)


class ReadOnly(admin.ModelAdmin):
    """Rows written by ingest or detection only."""

    show_full_result_count = False

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(SecurityRule)
class SecurityRuleAdmin(admin.ModelAdmin):
    """Turn rules on or off, set their severity, change thresholds (only the ones that
    differ from the defaults, shown below). Applies from the next detection run."""

    list_display = ["number", "key", "title", "severity", "enabled", "attack", "changed"]
    list_display_links = ["key"]
    list_editable = ["enabled", "severity"]
    list_filter = ["enabled", "severity", "number"]
    fields = ["key", "number", "title", "enabled", "severity", "attack", "params", "notes",
              "defaults", "signal", "false_positives"]
    readonly_fields = ["key", "number", "attack", "defaults", "signal", "false_positives"]

    @admin.display(description="thresholds changed")
    def changed(self, rule: SecurityRule) -> str:
        return ", ".join(sorted(rule.params)) if isinstance(rule.params, dict) else "?"

    @admin.display(description="default thresholds")
    def defaults(self, rule: SecurityRule) -> str:
        spec = RULES.get(rule.key)
        return format_html("<code>{}</code>", json.dumps(dict(spec.params), sort_keys=True)) \
            if spec else "—"

    @admin.display(description="signal")
    def signal(self, rule: SecurityRule) -> str:
        return RULES[rule.key].signal if rule.key in RULES else ""

    @admin.display(description="false positives")
    def false_positives(self, rule: SecurityRule) -> str:
        return RULES[rule.key].false_positives if rule.key in RULES else ""

    def has_add_permission(self, request: object) -> bool:
        return False  # rules are code; their rows are seeded

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(AllowListEntry)
class AllowListEntryAdmin(admin.ModelAdmin):
    list_display = ["kind", "value", "cluster", "starts_at", "ends_at", "reason"]
    list_filter = ["kind", "cluster"]
    search_fields = ["value", "reason"]


@admin.register(Advisory)
class AdvisoryAdmin(admin.ModelAdmin):
    list_display = ["software", "fixed_versions", "affected_from", "cves", "severity",
                    "enabled"]
    list_editable = ["enabled"]
    list_filter = ["software", "severity", "enabled"]
    search_fields = ["software", "cves", "note"]


@admin.register(QuietSchedule)
class QuietScheduleAdmin(admin.ModelAdmin):
    """Quiet windows: once, daily or weekly, on nodes or single GPUs. The next windows are
    shown in UTC once saved, to check the time zone did what was meant."""

    list_display = ["nodes", "gpus", "when", "cluster", "reason", "enabled"]
    list_editable = ["enabled"]
    list_filter = ["repeat", "enabled", "cluster"]
    search_fields = ["nodes", "gpus", "reason"]
    fieldsets = [
        (None, {"fields": ["cluster", "nodes", "gpus", "reason", "enabled"]}),
        ("When", {"fields": ["repeat", "start_time", "minutes", "weekdays", "timezone",
                             "starts_at", "ends_at", "next_windows"]}),
    ]
    readonly_fields = ["next_windows"]

    @admin.display(description="when")
    def when(self, row: QuietSchedule) -> str:
        return row.when()

    @admin.display(description="next windows (UTC)")
    def next_windows(self, row: QuietSchedule) -> str:
        if row.pk is None:
            return "shown once saved"
        zone = row.cluster.timezone if row.cluster else "UTC"
        window = row.as_window(zone)
        now = timezone.now().timestamp()
        if window.every is None:
            return row.when()
        found = window.every.occurrences(now, now + 15 * 86400, limit=5)
        return ", ".join(f"{iso_utc(a)[:16]}..{iso_utc(b)[11:16]}" for a, b in found) or \
            "none in the next 15 days"


@admin.register(SshAllowedSource)
class SshAllowedSourceAdmin(admin.ModelAdmin):
    """Where SSH logins to compute nodes may come from, per kind of user: admin users are
    the allow-list's admin users, service accounts its service accounts."""

    list_display = ["name", "network", "who", "cluster", "reason"]
    list_filter = ["who", "cluster"]
    search_fields = ["name", "network", "reason"]


@admin.register(IbStorageBaseline)
class IbStorageBaselineAdmin(admin.ModelAdmin):
    list_display = ["name", "nodes", "partition", "gbytes_per_s", "cluster", "reason"]
    list_filter = ["cluster"]
    search_fields = ["name", "nodes", "partition"]


@admin.register(ComponentAlias)
class ComponentAliasAdmin(admin.ModelAdmin):
    """The site's component names; the built-in ones always apply (listed below)."""

    list_display = ["alias", "component", "note"]
    search_fields = ["alias", "component"]
    readonly_fields = ["built_in"]
    fields = ["alias", "component", "note", "built_in"]

    @admin.display(description="built-in aliases")
    def built_in(self, row: ComponentAlias) -> str:
        return ", ".join(f"{a} = {c}" for a, c in sorted(ALIASES.items()))


class FindingEventInline(admin.TabularInline):
    model = FindingEvent
    extra = 0
    can_delete = False
    fields = readonly_fields = ("at", "actor", "action", "from_status", "to_status",
                                "assignee", "reason", "until")

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(Finding)
class FindingAdmin(ReadOnly):
    """Read-only: change a finding's status on its page (every change is audited there)."""

    list_display = ["title", "cluster", "rule_key", "severity", "status", "occurrences",
                    "last_seen"]
    list_filter = ["status", "severity", "rule_key", "cluster"]
    search_fields = ["title", "node_name", "user_name", "dedup_key"]
    raw_id_fields = ["job", "user", "team", "node", "assignee", "rule"]
    inlines = [FindingEventInline]


@admin.register(SshLogEvent)
class SshLogEventAdmin(ReadOnly):
    list_display = ["at", "cluster", "host", "kind", "user_name", "source"]
    list_filter = ["kind", "cluster"]
    search_fields = ["host", "user_name"]


@admin.register(NodeInventory)
class NodeInventoryAdmin(ReadOnly):
    list_display = ["node", "cluster", "collected_at", "received_at"]
    list_filter = ["cluster"]


@admin.register(ServiceProbe)
class ServiceProbeAdmin(ReadOnly):
    list_display = ["observed_at", "cluster", "node", "port", "service", "status",
                    "auth_required", "job_id_raw", "user_name"]
    list_filter = ["cluster", "service", "auth_required"]
