"""tests.k8s_double.selectors: the double's label selectors, so its answers can be trusted."""

import pytest

from tests.k8s_double.selectors import selector_matches


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (None, True),
        ("app=x", True),
        ("app==x,tier=web", True),
        ("app=y", False),
        ("app!=y", True),
        ("tier", True),
        ("!tier", False),
        ("missing", False),
        ("app in (x, z)", True),
        ("app notin (x,z),tier", False),
        ("app in (a,b)", False),
    ],
)
def test_label_selectors(selector, expected):
    assert selector_matches(selector, {"app": "x", "tier": "web"}) is expected
