from typing import Any

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.accounts import tokens
from apps.accounts.lockout import unlock
from apps.accounts.models import ApiToken, Contact, Membership, Profile, Team
from apps.clusters.models import SlurmAccount


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


class SlurmAccountInline(admin.TabularInline):
    model = SlurmAccount
    extra = 1


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["slug", "name"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline, SlurmAccountInline]


@admin.register(Contact)
class ContactAdmin(admin.ModelAdmin):
    list_display = ["area", "name", "email", "team", "cluster"]
    list_filter = ["area", "cluster"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Every user's named API tokens, to revoke one when someone leaves. Made only by their
    owner ("My API tokens") or ``manage.py create_token``: a key is shown once, to its maker."""

    list_display = ["name", "user", "hint", "created_at", "last_used_at", "expires_at"]
    list_filter = ["expires_at"]
    search_fields = ["name", "user__username", "hint"]
    fields = ["name", "user", "hint", "created_at", "last_used_at", "expires_at"]
    readonly_fields = ["name", "user", "hint", "created_at", "last_used_at"]

    def has_add_permission(self, request: Any) -> bool:
        return False

    def delete_model(self, request: Any, obj: ApiToken) -> None:
        tokens.revoke(obj, request)  # audited like a revoke on the page

    def delete_queryset(self, request: Any, queryset: Any) -> None:
        for token in queryset:
            tokens.revoke(token, request)


class ProfileInline(admin.StackedInline):
    model = Profile
    can_delete = False
    fields = ["slurm_username", "oidc_subject"]
    readonly_fields = ["oidc_subject"]  # written by the OIDC sign-in only


admin.site.unregister(User)


@admin.register(User)
class BeaconUserAdmin(UserAdmin):
    """Django's user admin plus the Slurm login name (jobs relink when it changes) and the
    action that lifts a sign-in lockout (audited; ``manage.py unlock_sign_in`` does the same
    without signing in)."""

    inlines = [*UserAdmin.inlines, ProfileInline]
    actions = ["unlock_sign_in"]

    @admin.action(description="Lift sign-in lockouts of the selected users",
                  permissions=["change"])
    def unlock_sign_in(self, request: HttpRequest, queryset: QuerySet[User]) -> None:
        removed = sum(unlock(user.username, via="admin action", request=request,
                             actor=request.user) for user in queryset)
        self.message_user(request, f"Sign-in unlocked for {queryset.count()} user(s): "
                                   f"{removed} failed-attempt record(s) removed.")
