"""The settings pytest runs with (pyproject.toml's DJANGO_SETTINGS_MODULE): portal.settings,
with passwords hashed by MD5 first, which takes microseconds where PBKDF2 takes tens of
milliseconds for each user a test creates; and a cache in memory (emptied before each test by
tests/conftest.py), so the sign-in limit's counters of one test never refuse another's.
Subprocesses the tests start (Celery workers, `manage.py`) inherit DJANGO_SETTINGS_MODULE and
so run with these settings too. WhiteNoise looks a static file up when it is asked for
(autorefresh), as with DEBUG on: the tests run with DEBUG off and no collected STATIC_ROOT,
where it would otherwise warn at every client's first request
(tests/integration/deploy/test_static.py serves a collected one as production does).
"""

from portal.settings import *  # noqa: F403
from portal.settings import PASSWORD_HASHERS

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher", *PASSWORD_HASHERS]

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

WHITENOISE_AUTOREFRESH = True
