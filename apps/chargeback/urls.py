from django.urls import path, register_converter

from apps.chargeback import views


class _Format:
    regex = "csv|json"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class _Month:
    regex = r"\d{4}-\d{2}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(_Format, "fmt")
register_converter(_Month, "month")

urlpatterns = [
    path("chargeback/", views.ChargebackHomeView.as_view(), name="chargeback-home"),
    path("chargeback/me/", views.MyUsageView.as_view(), name="chargeback-my-usage"),
    path("chargeback/<month:month>/export.<fmt:fmt>", views.MonthExportView.as_view(),
         name="chargeback-month-export"),
    path("chargeback/statements/<int:pk>/", views.StatementDetailView.as_view(),
         name="chargeback-statement"),
    path("chargeback/statements/<int:pk>/export.<fmt:fmt>", views.StatementExportView.as_view(),
         name="chargeback-statement-export"),
    path("chargeback/statements/<int:pk>/finalise/", views.FinaliseView.as_view(),
         name="chargeback-finalise"),
    path("chargeback/statements/<int:pk>/adjust/", views.AdjustView.as_view(),
         name="chargeback-adjust"),
    path("chargeback/terms/", views.TermsView.as_view(), name="chargeback-terms"),
    path("chargeback/rates/", views.RatesView.as_view(), name="chargeback-rates"),
    path("chargeback/rates/<int:pk>/", views.RateEditView.as_view(), name="chargeback-rate-edit"),
    path("chargeback/refresh/", views.RefreshView.as_view(), name="chargeback-refresh"),
    path("chargeback/reconcile/", views.ReconcileView.as_view(), name="chargeback-reconcile"),
    path("chargeback/reconciliations/<int:pk>/", views.ReconciliationDetailView.as_view(),
         name="chargeback-reconciliation"),
]
