# Allot: the two commands a newcomer needs are `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export DATABASE_URL_TEST ?= postgres://postgres@127.0.0.1:5432/allot
export REDIS_URL_TEST ?= redis://127.0.0.1:6379/0

.PHONY: run test lint bench venv venv-dev clean

$(VENV)/.installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.txt
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed
venv-dev: $(VENV)/.installed-dev

## make run: set up, migrate (SQLite under var/ unless DATABASE_URL), seed the demo, serve.
run: venv
	bash scripts/run.sh

## make lint: ruff and mypy.
lint: venv-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy core portal quotas scheduling billing policies

## make test: lint, then the whole suite against PostgreSQL and Redis (started if down).
test: venv-dev lint
	bash scripts/ensure_system_packages.sh
	bash scripts/services.sh
	DATABASE_URL=$${DATABASE_URL:-$(DATABASE_URL_TEST)} REDIS_URL=$${REDIS_URL:-$(REDIS_URL_TEST)} \
		$(VENV)/bin/pytest

## make bench: the benchmarks that print the figures.
bench: venv-dev
	bash scripts/bench.sh

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
