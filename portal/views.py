"""Portal pages: sign-in, the home page (the researcher's dashboard), the read-only queue tree."""

from typing import Any

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from portal.login_limits import login_failed, login_wait_s, refusal
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


class LoginView(auth_views.LoginView):
    """Django's sign-in page, refusing (429) a username or address with too many failures
    before any password is checked (portal/login_limits.py)."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        username = request.POST.get("username", "")
        wait = login_wait_s(request, username)
        if wait:
            form = self.form_class(request, initial={"username": username})
            context = self.get_context_data(form=form, refused=refusal(wait))
            response = self.render_to_response(context, status=429)
            response["Retry-After"] = str(wait)
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: Any) -> HttpResponse:
        login_failed(self.request, self.request.POST.get("username", ""))
        return super().form_invalid(form)
