"""`budget_banner` for base.html: the strongest budget action in force for the user's teams."""

from billing.selectors import budget_banner as _budget_banner


def budget_banner(request):
    """Adds `budget_banner` ({level, message} or None) to every page's context."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"budget_banner": _budget_banner(user)}
