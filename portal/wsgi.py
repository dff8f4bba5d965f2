"""WSGI entry point (gunicorn portal.wsgi)."""

import logging
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
application = get_wsgi_application()


def _warm_broker_client() -> None:
    """Import the broker's client now rather than in a request: the first submission of each
    process nudges the workers, and that first publish imported the transport (redis-py,
    about 0.1 s of CPU, several seconds of wall time under load with other threads waiting
    on the import lock). Creating the connection object connects to nothing."""
    try:
        from celery import current_app

        current_app.connection_for_write().release()
    except Exception:  # a broken broker URL shows at the first nudge, logged there
        logging.getLogger(__name__).warning("could not load the broker's client", exc_info=True)


_warm_broker_client()
