#!/usr/bin/env bash
# `make run`: migrate, seed the demo organisation and its workloads, then start the portal on
# 127.0.0.1:8000, a Celery worker and the beat, with the simulated clusters. Ctrl-C stops all.
#
# Broker: CELERY_BROKER_URL if set (redis://... or amqp://...); otherwise the filesystem broker
# under var/broker configured in portal/settings.py, which needs no server.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
CELERY=.venv/bin/celery
PORT="${PORT:-8000}"
mkdir -p var
$PY manage.py migrate --noinput
$PY manage.py seed_demo

echo "broker: ${CELERY_BROKER_URL:-filesystem (var/broker, no server)}"
pids=()
stop() {
  trap - INT TERM EXIT
  echo "stopping portal, worker and beat"
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop INT TERM EXIT

# SQLite (the default database) takes one writer at a time: keep the worker small there.
concurrency=2
[ -z "${DATABASE_URL:-}" ] && concurrency=1
$CELERY -A portal worker --loglevel=INFO --concurrency="$concurrency" -n "allot-run@%h" &
pids+=($!)
$CELERY -A portal beat --loglevel=INFO -s var/celerybeat-schedule &
pids+=($!)
$PY manage.py runserver "127.0.0.1:$PORT" --noreload &
pids+=($!)
echo "portal on http://127.0.0.1:$PORT/ (Ctrl-C stops everything)"
wait -n "${pids[@]}" || true
