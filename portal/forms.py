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
