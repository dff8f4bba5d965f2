"""Portal pages: sign-in (passwords and single sign-on), the home page (the researcher's
dashboard), the read-only queue tree, the user's API tokens."""

from decimal import Decimal
from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from core.listing import csv_response, sort_from, wants_csv
from portal.forms import TokenForm
from portal.login_limits import login_wait_s, refusal
from portal.pages import views as page_views
from portal.pages.access import user_scope
from portal.selectors import api_token_list
from portal.services import api_token_create, api_token_revoke
from portal.sso.options import sign_in_options
from portal.sso.outcome import noted_error
from quotas import selectors

# The tree page's sortable columns (?sort=): its order (queue path) or GPU totals over models.
TREE_SORT = {"queue": ("path",), "name": ("name",), "used": ("gpu_used",),
             "borrowed": ("gpu_borrowed",), "lent": ("gpu_lent",), "pending": ("gpu_pending",)}
FIGURES = ("min", "max", "lendable", "used", "borrowed", "lent", "pending")


def _tree_context(request: HttpRequest) -> dict:
    # The API's rule (GET /api/v1/queues): the user's part of the tree only.
    as_of = timezone.now()  # the time of the data: read before the rows
    rows = selectors.queue_rows(user=request.user, scope=user_scope(request.user))
    columns = [(f, r) for f, resources in selectors.tree_flavors(rows) for r in resources]
    sort = sort_from(request, TREE_SORT, "queue")
    for row in rows:
        row["cells"] = [row["quota"].get(f, {}).get(r) for f, r in columns]
        row["indent"] = (row["depth"] - 1) * 1.25
        gpu = [res["gpu"] for res in row["quota"].values() if "gpu" in res]
        for figure in ("used", "borrowed", "lent", "pending"):
            row[f"gpu_{figure}"] = sum((c[figure] for c in gpu), Decimal(0))
    tree_order = sort.column == "queue" and not sort.descending
    if not tree_order:
        rows = sort.rows_sorted(rows, lambda row, field: row[field])
    return {"rows": rows, "columns": columns, "sort": sort, "tree_order": tree_order,
            "as_of": as_of}


def _tree_csv(context: dict) -> HttpResponseBase:
    header = ["queue", "depth", "namespace", *(f"{f}/{r} {fig}" for f, r in context["columns"]
                                                for fig in FIGURES)]
    return csv_response("queues.csv", header, (
        [row["path"], row["depth"], row["namespace"] if row["is_leaf"] else "",
         *("" if c is None or c[fig] is None else c[fig]
           for c in row["cells"] for fig in FIGURES)]
        for row in context["rows"]))


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The home page: the researcher dashboard (the same page as /dashboard/)."""
    return page_views.dashboard(request)


@login_required
def tree(request: HttpRequest) -> HttpResponseBase:
    """The whole queue tree with min/max/lendable and usage per flavor (read-only); sortable
    (?sort=) and as CSV (?format=csv)."""
    context = _tree_context(request)
    if wants_csv(request) and not context["sort"].error:
        return _tree_csv(context)
    return render(request, "portal/home.html", context,
                  status=400 if context["sort"].error else 200)


@login_required
def tree_partial(request: HttpRequest) -> HttpResponse:
    """The queue tree alone: the partial htmx swaps in to refresh the tree page (its sort
    kept), and the dashboard's copy (`?embedded=1`: no sort links or CSV, which belong to the
    tree page)."""
    context = _tree_context(request)
    context["embedded"] = request.GET.get("embedded") == "1"
    return render(request, "portal/partials/queue_tree.html", context)


class LoginView(auth_views.LoginView):
    """Django's sign-in page, with the single sign-on button when OpenID Connect is on and the
    password form when a password can sign anyone in (local accounts, an LDAP directory).

    A username or address with too many failures is refused (429) before any password is
    checked (portal/login_limits.py, which also counts failures); a password when none is
    accepted is refused (403) naming the way in; a directory that failed is a 503 naming it."""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), "sign_in": sign_in_options()}

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        options = sign_in_options()
        if not options.passwords:
            context = self.get_context_data(form=self.form_class(request),
                                            refused=options.passwords_off())
            return self.render_to_response(context, status=403)
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
        reason = noted_error(self.request)
        if reason is None:
            return super().form_invalid(form)
        context = self.get_context_data(form=form, refused=f"Signing in failed: {reason}.")
        return self.render_to_response(context, status=503)


def admin_login(request: HttpRequest) -> HttpResponse:
    """The admin's sign-in form, or, when no password is accepted, this site's sign-in page
    (its single sign-on button), coming back to the admin."""
    if sign_in_options().passwords:
        return admin.site.login(request)
    return redirect_to_login(request.GET.get("next") or reverse("admin:index"))


@login_required
def api_tokens(request: HttpRequest) -> HttpResponse:
    """The user's API tokens (scope, expiry, last use); a new one is shown once, here."""
    form, created = TokenForm(request.POST or None), None
    if request.method == "POST" and form.is_valid():
        token, raw = api_token_create(user=request.user, **form.cleaned_data)
        created, form = {"token": token, "raw": raw}, TokenForm()
    return render(request, "portal/tokens.html", {
        "form": form, "created": created, "tokens": api_token_list(user=request.user)},
        status=400 if form.errors else 200)


@login_required
@require_POST
def api_token_revoke_view(request: HttpRequest, pk: int) -> HttpResponse:
    """Revoke one of the user's tokens (another user's is 404)."""
    token = get_object_or_404(api_token_list(user=request.user), pk=pk)
    api_token_revoke(token=token)
    messages.success(request, f"Token {token.prefix}… revoked: requests sending it are refused.")
    return redirect("api-tokens")
