#!/usr/bin/env bash
# `make bench`: every benchmark under bench/ that prints figures.
set -euo pipefail
cd "$(dirname "$0")/.."
for mod in $(ls bench/*.py 2>/dev/null | grep -v __init__ | sed 's#/#.#; s#\.py$##'); do
  echo "== $mod"
  .venv/bin/python -m "$mod"
done
