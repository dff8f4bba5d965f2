"""Forms for accounts: a new API token (scope and lifetime)."""

from typing import Any

from django import forms
from django.conf import settings
from django.core.validators import MaxValueValidator

from portal.models import TokenScope


class TokenForm(forms.Form):
    """A new personal API token: what it may do and how many days it lives."""

    scope = forms.ChoiceField(choices=TokenScope.choices, initial=TokenScope.WRITE)
    expires_in_days = forms.IntegerField(label="Lifetime (days)", min_value=1)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limit = settings.ALLOT_API_TOKEN_MAX_DAYS
        field = self.fields["expires_in_days"]
        field.initial = settings.ALLOT_API_TOKEN_TTL_DAYS
        field.validators.append(MaxValueValidator(limit))
        field.widget.attrs["max"] = limit
        field.help_text = f"From 1 to {limit} days."


def time_zone_choices() -> list[tuple[str, str]]:
    """Every IANA time zone the server knows, the server's default first."""
    import zoneinfo

    names = sorted(zoneinfo.available_timezones())
    return [("", f"The server's ({settings.TIME_ZONE})"), *((n, n) for n in names)]


class ProfileForm(forms.Form):
    """The profile page's settings: the time zone times are shown in, muted notifications."""

    time_zone = forms.ChoiceField(label="Time zone", required=False,
                                  help_text="Pages show dates and times in this zone.")
    muted_kinds = forms.MultipleChoiceField(
        label="Mute these notifications", required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="A muted kind is neither shown under the bell nor emailed.")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from portal.models import NotificationKind

        super().__init__(*args, **kwargs)
        self.fields["time_zone"].choices = time_zone_choices()  # type: ignore[attr-defined]
        self.fields["muted_kinds"].choices = NotificationKind.choices  # type: ignore[attr-defined]
