"""Portal pages."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The home page: the queue tree (filled by the quotas app's selectors)."""
    return render(request, "portal/home.html", {})
