from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.accounts.lockout import unlock
from apps.accounts.models import Contact, Membership, Profile, Team
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
