#!/usr/bin/env bash
# Make sure PostgreSQL and Redis answer on loopback; start them where this machine can,
# otherwise say how.
set -u
pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
redis_up() { (exec 3<>/dev/tcp/127.0.0.1/6379 && printf 'PING\r\n' >&3 && head -c5 <&3 | grep -q PONG) 2>/dev/null; }

if ! pg_up; then
  echo "PostgreSQL is down on 127.0.0.1:5432; starting it" >&2
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
  for _ in $(seq 1 30); do pg_up && break; sleep 1; done
  pg_up || { echo "PostgreSQL is not running. Start it (e.g. 'pg_ctlcluster <version> main start') or set DATABASE_URL." >&2; exit 1; }
fi
if ! redis_up; then
  echo "Redis is down on 127.0.0.1:6379; starting it" >&2
  if command -v redis-server >/dev/null; then
    mkdir -p /tmp/allot-redis
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
      --dir /tmp/allot-redis --logfile /tmp/allot-redis/redis.log || true
  fi
  for _ in $(seq 1 30); do redis_up && break; sleep 1; done
  redis_up || { echo "Redis is not running. Start it with 'redis-server --port 6379' or set REDIS_URL." >&2; exit 1; }
fi
exit 0
