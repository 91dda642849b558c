from __future__ import annotations

from rest_framework import serializers

from apps.accounts.models import Membership, Team


class MembershipSerializer(serializers.ModelSerializer):
    user = serializers.CharField(source="user.username")

    class Meta:
        model = Membership
        fields = ["user", "role"]


class TeamSerializer(serializers.ModelSerializer):
    members = MembershipSerializer(source="memberships", many=True, read_only=True)
    slurm_accounts = serializers.SerializerMethodField()

    class Meta:
        model = Team
        fields = ["id", "slug", "name", "description", "members", "slurm_accounts"]

    def get_slurm_accounts(self, team: Team) -> list[str]:
        return [f"{a.cluster.name}:{a.name}" for a in team.slurm_accounts.all()]
