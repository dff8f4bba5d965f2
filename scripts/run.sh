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
# Local state: the SQLite database (the default), the beat's schedule, file locks.
mkdir -p var
$PY manage.py migrate --noinput
# A month of past work replayed through the engine and billed, on the first start only (about
# a minute; `seed_demo --history` says when it is already there). ALLOT_DEMO_HISTORY= (empty)
# starts without one.
$PY manage.py seed_demo --history "${ALLOT_DEMO_HISTORY-30d}"

echo "broker: ${CELERY_BROKER_URL:-filesystem (var/broker, no server)}"

# Telemetry for billing: where a Prometheus binary is installed (Debian package `prometheus`)
# and none is configured, scrape each simulated cluster's DCGM endpoint with one on loopback.
# Without it the demo still runs: billing then records the minutes as telemetry gaps.
# The endpoint answers only a staff login or the bearer token of ALLOT_SIM_METRICS_TOKEN: one
# is made here (unless set) for the portal started below and written into Prometheus's config.
# The same Prometheus scrapes Allot's own /metrics (ALLOT_METRICS_TOKEN, made the same way) and
# evaluates the alert rules of deploy/prometheus on them (its page /alerts lists them).
start_prometheus=""
if [ -z "${ALLOT_PROMETHEUS_URL:-}" ] && command -v prometheus >/dev/null 2>&1; then
  PROM_PORT="${PROM_PORT:-9095}"
  mkdir -p var/prometheus
  if [ -z "${ALLOT_SIM_METRICS_TOKEN:-}" ]; then
    ALLOT_SIM_METRICS_TOKEN="$($PY -c 'import secrets; print(secrets.token_urlsafe(32))')"
    export ALLOT_SIM_METRICS_TOKEN
  fi
  if [ -z "${ALLOT_METRICS_TOKEN:-}" ]; then
    ALLOT_METRICS_TOKEN="$($PY -c 'import secrets; print(secrets.token_urlsafe(32))')"
    export ALLOT_METRICS_TOKEN
  fi
  rm -f var/prometheus.yml
  (umask 077; {
    printf 'global:\n  scrape_interval: 15s\nrule_files: [%s]\nscrape_configs:\n' \
      "'$PWD/deploy/prometheus/allot-alerts.yml'"
    printf '  - job_name: allot\n    authorization: {credentials: %s}\n' \
      "'$ALLOT_METRICS_TOKEN'"
    printf '    static_configs: [{targets: [%s]}]\n' "'127.0.0.1:$PORT'"
    $PY manage.py shell -v0 -c "
import os
from scheduling.models import Cluster
token = os.environ['ALLOT_SIM_METRICS_TOKEN']
for name in Cluster.objects.filter(backend='simulated').values_list('name', flat=True):
    print(f'  - job_name: dcgm-{name}\\n    metrics_path: /sim/{name}/metrics\\n'
          f'    authorization: {{credentials: \\'{token}\\'}}\\n'
          f'    static_configs: [{{targets: [\\'127.0.0.1:$PORT\\']}}]')
"
  } > var/prometheus.yml)
  export ALLOT_PROMETHEUS_URL="http://127.0.0.1:$PROM_PORT"
  start_prometheus=1
fi

pids=()
stop() {
  trap - INT TERM EXIT
  echo "stopping portal, worker and beat"
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop INT TERM EXIT

# SQLite (the default database) takes one writer at a time: keep the worker small there.
# The cluster watch holds a worker process for its session: with one process it would starve
# the cycle, so there the periodic sync follows the simulated clusters instead.
concurrency=2
if [ -z "${DATABASE_URL:-}" ]; then
  concurrency=1
  export ALLOT_WATCH="${ALLOT_WATCH:-false}"
fi
# The worker and the beat are started again whenever they exit, as a production supervisor
# (systemd Restart=always, a Kubernetes Deployment) would: a Celery worker can exit on its own
# when the broker goes away (docs/faults.md).
supervise() {
  local name=$1 child="" code
  shift
  trap 'if [ -n "$child" ]; then kill "$child" 2>/dev/null; wait "$child" 2>/dev/null; fi; exit 0' TERM INT
  while true; do
    "$@" &
    child=$!
    if wait "$child"; then code=0; else code=$?; fi
    echo "$name exited (code $code); starting it again in 2 s" >&2
    sleep 2
  done
}
supervise worker $CELERY -A portal worker --loglevel=INFO --concurrency="$concurrency" \
  -n "allot-run@%h" &
pids+=($!)
supervise beat $CELERY -A portal beat --loglevel=INFO -s var/celerybeat-schedule &
pids+=($!)
$PY manage.py runserver "127.0.0.1:$PORT" --noreload &
pids+=($!)
if [ -n "$start_prometheus" ]; then
  prometheus --config.file=var/prometheus.yml --storage.tsdb.path=var/prometheus \
    --web.listen-address="127.0.0.1:$PROM_PORT" --log.level=warn >var/prometheus.log 2>&1 &
  pids+=($!)
  echo "telemetry: Prometheus on $ALLOT_PROMETHEUS_URL scraping the simulated DCGM endpoints" \
    "and /metrics (alerts: $ALLOT_PROMETHEUS_URL/alerts)"
fi
echo "portal on http://127.0.0.1:$PORT/ (Ctrl-C stops everything)"
wait -n "${pids[@]}" || true
