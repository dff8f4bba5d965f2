"""The Allot Django project: settings, urls, the Celery app, accounts and API tokens."""

from portal.celery import app as celery_app

__all__ = ["celery_app"]
