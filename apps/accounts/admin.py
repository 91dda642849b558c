from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import User

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
    """Django's user admin plus the Slurm login name (jobs relink when it changes)."""

    inlines = [*UserAdmin.inlines, ProfileInline]
