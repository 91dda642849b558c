"""The audit page for platform admins."""

from __future__ import annotations

from typing import Any

from django.views.generic import ListView

from apps.accounts.permissions import ADMIN, ActionRequiredMixin
from apps.audit.forms import AuditFilterForm
from apps.audit.models import AuditEvent


class AuditListView(ActionRequiredMixin, ListView):
    """Newest events first, filtered by action and user name."""

    template_name = "audit/list.html"
    required_action = ADMIN
    paginate_by = 100
    context_object_name = "events"

    def get_queryset(self) -> Any:
        filters = AuditFilterForm(self.request.GET).filters()
        return AuditEvent.objects.visible_to(self.request.user).filter(**filters)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        ctx.update(actions=AuditEvent.Action.choices,
                   action=self.request.GET.get("action", ""),
                   user_filter=self.request.GET.get("user", ""))
        return ctx
