"""The capacity request form."""

from django import forms

from quotas.models import Flavor, Queue, Resource


class CapacityRequestForm(forms.Form):
    """Raise (or lower) a queue's min and/or max for one GPU model over a period."""

    queue = forms.ModelChoiceField(queryset=Queue.objects.none(), to_field_name="path",
                                   help_text="The queue whose quota should change.")
    flavor = forms.ModelChoiceField(queryset=Flavor.objects.all(), to_field_name="name",
                                    label="GPU model")
    resource = forms.ChoiceField(choices=Resource.choices, initial=Resource.GPU)
    min = forms.DecimalField(required=False, min_value=0, decimal_places=3,
                             label="New min (guaranteed)", help_text="Empty: unchanged.")
    max = forms.DecimalField(required=False, min_value=0, decimal_places=3,
                             label="New max (ceiling)", help_text="Empty: unchanged.")
    starts_at = forms.DateTimeField(
        required=False, label="Starts", help_text="Empty: as soon as approved.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    ends_at = forms.DateTimeField(
        required=False, label="Ends", help_text="Empty: permanent.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    justification = forms.CharField(widget=forms.Textarea(attrs={"rows": 4}))

    def __init__(self, *args, queues=None, **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        if queues is not None:
            self.fields["queue"].queryset = queues  # type: ignore[attr-defined]


class DecisionForm(forms.Form):
    """Approve or deny with a comment."""

    comment = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))


class CommentForm(forms.Form):
    message = forms.CharField(label="Comment", widget=forms.Textarea(attrs={"rows": 2}))
