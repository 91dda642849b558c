"""The preference forms: a user's own choices, and a team's defaults (its leads')."""

from __future__ import annotations

from django import forms

from apps.guardrails.models import Alert, AlertPreference, TeamAlertSetting

ALERT_CHOICES = (("", "Follow my team's default"), ("on", "On"), ("off", "Off"))


class PreferenceForm(forms.ModelForm):
    webhook_url = forms.URLField(required=False, assume_scheme="https",
                                 label="Slack or Mattermost incoming webhook (optional)")
    alerts_choice = forms.ChoiceField(choices=ALERT_CHOICES, required=False,
                                      label="Alerts about my running jobs")
    kinds_off = forms.MultipleChoiceField(choices=Alert.Kind.choices, required=False,
                                          widget=forms.CheckboxSelectMultiple,
                                          label="Kinds I do not want")

    class Meta:
        model = AlertPreference
        fields = ["webhook_url", "webhook_format", "digest"]
        labels = {"webhook_url": "Slack or Mattermost incoming webhook (optional)",
                  "digest": "Weekly right-sizing digest"}

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        alerts = self.instance.alerts
        self.initial["alerts_choice"] = "" if alerts is None else ("on" if alerts else "off")
        self.initial["kinds_off"] = self.instance.kinds_off or []

    def save(self, commit: bool = True) -> AlertPreference:
        pref = super().save(commit=False)
        choice = self.cleaned_data["alerts_choice"]
        pref.alerts = None if not choice else choice == "on"
        pref.kinds_off = list(self.cleaned_data["kinds_off"])
        if commit:
            pref.save()
        return pref


class TeamSettingForm(forms.ModelForm):
    webhook_url = forms.URLField(required=False, assume_scheme="https",
                                 label="Team webhook (every alert on the team's jobs)")
    class Meta:
        model = TeamAlertSetting
        fields = ["alerts_default", "webhook_url", "webhook_format", "lead_digest"]
        labels = {"alerts_default": "Alerts on for members who did not choose",
                  "webhook_url": "Team webhook (every alert on the team's jobs)",
                  "lead_digest": "Weekly team digest to the leads"}


class ExemptJobForm(forms.Form):
    reason = forms.CharField(max_length=300)



class AlertScopeForm(forms.Form):
    """My alerts' ``?scope=``: "mine", or "team" (a lead's teams; every job for an admin). An
    unknown value, or one the user may not take, falls back to "mine", so a stale bookmark
    still opens."""

    scope = forms.CharField(required=False)

    def scope_for(self, may_see_teams: bool) -> str:
        scope = self.cleaned_data.get("scope", "") if self.is_valid() else ""
        return "team" if scope == "team" and may_see_teams else "mine"
