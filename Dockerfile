# syntax=docker/dockerfile:1
# Allot's image: the portal (gunicorn, the default command) and, with another command, the
# Celery worker and the beat (docs/operations.md):
#
#   docker build -t allot:1.0 .
#   docker run allot:1.0                                          # web, on port 8000
#   docker run allot:1.0 celery -A portal worker --loglevel INFO  # a worker
#   docker run allot:1.0 celery -A portal beat --loglevel INFO \
#       --schedule /tmp/celerybeat-schedule                       # the one beat
#
# Every process reads its settings from the environment (README, docs/deployment.md);
# SECRET_KEY and DATABASE_URL have no default in production and are given at run time.

# --- build: the runtime requirements in a virtual environment --------------------------------
FROM python:3.11-slim-bookworm AS build

# python-ldap (requirements.txt) has no wheels: it is compiled here, against the OpenLDAP and
# SASL headers. Versions are not pinned: the image's tag fixes the Debian release, and a pin
# would break the build at its next security update.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev libldap2-dev libsasl2-dev \
    && rm -rf /var/lib/apt/lists/*
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/venv
COPY requirements.txt /tmp/requirements.txt
RUN /opt/venv/bin/pip install --no-cache-dir -r /tmp/requirements.txt

# --- runtime: the venv, the code, the collected static files; no compiler, not root --------
FROM python:3.11-slim-bookworm AS runtime

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=portal.settings \
    ALLOT_ENV=production \
    STATIC_ROOT=/app/staticfiles \
    GUNICORN_BIND=0.0.0.0:8000

# The libraries python-ldap was built against (no compiler, no headers).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libldap-2.5-0 libsasl2-2 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 allot \
    && useradd --system --uid 10001 --gid allot --home-dir /app --no-create-home \
       --shell /usr/sbin/nologin allot

WORKDIR /app
COPY --from=build /opt/venv /opt/venv
COPY . /app

# The static files are collected (with their gzip copies) into the image, where WhiteNoise
# serves them; the settings need a SECRET_KEY to load in production, and this one signs
# nothing: the real key is given at run time. The code is compiled once here, as the
# processes run without writing bytecode.
RUN SECRET_KEY=collectstatic-at-build-time-signs-nothing \
    python manage.py collectstatic --noinput \
    && python -m compileall -q portal core quotas scheduling billing policies

# Files owned by root and read-only to the processes; they write only under /tmp.
USER 10001:10001
EXPOSE 8000

CMD ["gunicorn", "--config", "gunicorn.conf.py", "portal.wsgi"]
