#!/usr/bin/env bash
# `make run`: migrate, seed the demo organisation, serve the portal on 127.0.0.1:8000.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
mkdir -p var
$PY manage.py migrate --noinput
$PY manage.py seed_demo
exec $PY manage.py runserver 127.0.0.1:8000
