# Allot: the two commands a newcomer needs are `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export DATABASE_URL_TEST ?= postgres://postgres@127.0.0.1:5432/allot
export REDIS_URL_TEST ?= redis://127.0.0.1:6379/0

.PHONY: run test lint bench chaos venv venv-dev clean

# The `allot` command line (pyproject.toml) is installed in editable mode, without its
# dependencies (requirements.txt pins them): .venv/bin/allot runs this checkout's allot_cli/.
$(VENV)/.installed: requirements.txt pyproject.toml
	bash scripts/ensure_system_packages.sh build
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.txt
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed
venv-dev: $(VENV)/.installed-dev

## make run: set up, migrate (SQLite under var/ unless DATABASE_URL), seed the demo, serve.
run: venv
	bash scripts/run.sh

## make lint: ruff, mypy and the architecture's rules; every check runs, any failure fails it.
##   lint-imports (contracts in pyproject.toml), one line each:
##     scheduling.engine is pure Python: no Django, Celery, kubernetes, no project code outside it;
##     only scheduling.backends imports kubernetes (and core.quantity, its quantity parser only);
##     no module outside the policies app imports it (it plugs in through scheduling.extensions);
##     core, the shared kernel (core/changes.py, core/db.py, core/quantity.py), imports no app;
##     allot_cli, the command line, imports no app and no server library: it speaks the REST API.
##   scripts/check_imports.py: no import circles among the project's modules (each printed as its
##     chain of imports); core.quantity imports nothing of kubernetes but kubernetes.utils.quantity.
##   vulture: no dead code (vulture_whitelist.py: what Django, DRF and Celery use by name).
lint: venv-dev
	@status=0; \
	$(VENV)/bin/ruff check . || status=1; \
	$(VENV)/bin/mypy core portal quotas scheduling billing policies allot_cli \
		scripts/check_imports.py || status=1; \
	$(VENV)/bin/lint-imports --no-logo --no-cache || status=1; \
	$(PY) scripts/check_imports.py || status=1; \
	$(VENV)/bin/vulture || status=1; \
	exit $$status

## make test: lint, then the whole suite against PostgreSQL and Redis (started if down).
test: venv-dev lint
	bash scripts/ensure_system_packages.sh
	bash scripts/services.sh
	DATABASE_URL=$${DATABASE_URL:-$(DATABASE_URL_TEST)} REDIS_URL=$${REDIS_URL:-$(REDIS_URL_TEST)} \
		$(VENV)/bin/pytest

## make bench: the benchmarks that print the figures.
bench: venv-dev
	bash scripts/bench.sh

## make chaos: the fault and load suite, full size (docs/faults.md): 200 clients for 2 minutes
##   while workers are killed mid-cycle and the broker and the database go down, on a throwaway
##   PostgreSQL and Redis; then the invariants and schemathesis. `make test` runs its short version.
chaos: venv-dev
	$(PY) -m tests.chaos.run

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache .import_linter_cache .grimp_cache
