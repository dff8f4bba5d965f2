"""Portal pages: the home page (the researcher's dashboard) and the read-only queue tree."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from portal.pages import views as page_views
from quotas import selectors


def _tree_context(request: HttpRequest) -> dict:
    rows = selectors.queue_rows(user=request.user)
    columns = [(f, r) for f, resources in selectors.tree_flavors(rows) for r in resources]
    for row in rows:
        row["cells"] = [row["quota"].get(f, {}).get(r) for f, r in columns]
        row["indent"] = (row["depth"] - 1) * 1.25
    return {"rows": rows, "columns": columns}


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The home page: the researcher dashboard (the same page as /dashboard/)."""
    return page_views.dashboard(request)


@login_required
def tree(request: HttpRequest) -> HttpResponse:
    """The whole queue tree with min/max/lendable and usage per flavor (read-only)."""
    return render(request, "portal/home.html", _tree_context(request))


@login_required
def tree_partial(request: HttpRequest) -> HttpResponse:
    """The queue tree alone: the partial htmx swaps in to refresh the tree page."""
    return render(request, "portal/partials/queue_tree.html", _tree_context(request))
