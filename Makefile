# Beacon: the two commands are `make demo` and `make test`. Everything else is a step of those.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
DEMO_DIR ?= data/demo
# Links in alerts, digests and webhooks point where the portal is served (issue 26: they said
# port 8000 while `PORT=8123 make demo` served on 8123). Set SITE_URL for a public address.
SITE_URL ?= http://$(HOST):$(PORT)
# When the command started (before any install), for the steps' times and "ready in N s";
# sub-makes inherit it.
ifndef DEMO_T0
DEMO_T0 := $(shell date +%s)
endif
export DEMO_T0
SINCE = $$(( $$(date +%s) - $(DEMO_T0) )) s

.PHONY: venv venv-dev demo demo-data demo-full demo-full-stop serve test lint bench fuzz screenshots

# Two stamps: the demo needs only the runtime; tests and benchmarks need the dev tools too.
$(VENV)/.installed: requirements.txt
	@echo "==> installing the Python packages (once; $(SINCE))"
	PYTHON=$(PYTHON) ./deploy/dev/bootstrap.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements.txt
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.txt
	$(VENV)/bin/pip install -q -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed
venv-dev: $(VENV)/.installed-dev

## make demo: install, migrate, load the simulated demo cluster, serve on http://$(HOST):$(PORT)
demo: demo-data
	@$(MAKE) --no-print-directory serve

# The simulator needs no database: it writes its month while the database is migrated.
demo-data: venv
	@echo "==> [1/3] the database and the simulated month, side by side ($(SINCE))"
	@SITE_URL=$(SITE_URL) $(PY) manage.py demo --out $(DEMO_DIR) --simulate-only & sim=$$!; \
	  SITE_URL=$(SITE_URL) $(PY) manage.py migrate --noinput -v0 \
	  && SITE_URL=$(SITE_URL) $(PY) manage.py collectstatic --noinput -v0 \
	  || { kill $$sim 2>/dev/null; exit 1; }; wait $$sim
	@echo "==> [2/3] loading the month through Beacon's importers ($(SINCE))"
	SITE_URL=$(SITE_URL) $(PY) manage.py demo --out $(DEMO_DIR)

## make demo-full: the same month through the live paths (Prometheus + VictoriaMetrics, Redis, Celery)
demo-full: demo-data
	DEMO_DIR=$(DEMO_DIR) ./deploy/dev/demo-full.sh up

demo-full-stop:
	./deploy/dev/demo-full.sh down

serve: venv
	@echo "==> [3/3] starting the web server on $(SITE_URL)/ ($(SINCE))"
	SITE_URL=$(SITE_URL) $(VENV)/bin/gunicorn portal.wsgi -c deploy/dev/gunicorn_ready.py -b $(HOST):$(PORT) -w 2 --timeout 120 \
	  --access-logfile -

## make test: the whole suite (SQLite unless DATABASE_URL is set; CI sets it and CI=true),
## on TEST_WORKERS processes: one per shared-service lane (each Slurm release; Prometheus and Redis;
## VictoriaMetrics), the rest for everything else (tests/xdist_lanes.py)
TEST_WORKERS ?= 7
test: venv-dev
	$(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

lint: venv-dev
	$(VENV)/bin/ruff check .
	$(PY) manage.py check --fail-level WARNING
	$(PY) manage.py makemigrations --check --dry-run
	$(PY) -m mypy apps portal

## make bench: every benchmark, written to docs/BENCHMARKS.md (BENCH_ARGS=--quick: under 5 min;
## BENCH_ARGS=NAME runs one; bench/README.md lists them and the services they use)
bench: venv-dev
	$(PY) -m bench $(BENCH_ARGS)

## make fuzz: a longer schemathesis run over the whole API (new examples every run; CI runs 25)
FUZZ_EXAMPLES ?= 500
fuzz: venv-dev
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) FUZZ_RANDOM=1 $(PY) -m pytest -q -p no:cacheprovider tests/api/test_fuzz.py

## make screenshots: each persona's main pages on a small simulated demo, in Debian's Chromium,
## saved into docs/screenshots/ (the README shows them; `make test` takes them too, into test-results/)
screenshots: venv-dev
	SCREENSHOTS_TO_DOCS=1 $(PY) -m pytest -q -p no:cacheprovider tests/e2e/test_persona_screens.py
