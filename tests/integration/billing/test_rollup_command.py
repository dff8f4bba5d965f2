"""`manage.py billing_rollup`: bad or out-of-range times are a CommandError naming them."""

import pytest
from django.core.management import CommandError, call_command


@pytest.mark.django_db
@pytest.mark.parametrize("args, message", [
    (["--from", "2026-02-30T00:00Z"], "bad time: day is out of range for month"),
    (["--from", "9999-12-31T23:00Z"], "time out of range (9999-12-31T23:00Z to None)"),
    (["--from", "2026-03-01T00:00"], "times must carry a timezone"),
])
def test_bad_times_are_named(args, message):
    with pytest.raises(CommandError) as caught:
        call_command("billing_rollup", *args)
    assert message in str(caught.value)
