# Punctual: every entry point a newcomer needs. Each target is idempotent.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.txt requirements-dev.txt pyproject.toml clients/python/pyproject.toml cdk/pyproject.toml | sha1sum | cut -c1-12)
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: install run test lint format unit integration infra-test e2e bench synth layer deploy destroy chaos clean browser docs

install: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml clients/python/pyproject.toml cdk/pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt -r requirements-dev.txt
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e clients/python  # the punctual command
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e cdk  # punctual-cdk, the construct library
	@rm -f $(VENV)/.installed-*
	@touch $@

# The structure check (.ci/structure_check.py): no module over 800 lines, no class over 400, no
# import cycle, AWS clients and environment reads only in their one home; one line per violation.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python .ci/structure_check.py

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The long e2e runs with local modes of their own (chaos, a chaos run stopped by SIGTERM, Region
# loss, the cloud's cadence, a retry rate), then
# the tests that drive servers of their own (the moto-server comparisons, schemathesis against the
# local API): a third pytest process, one after another, beside the shared local mode's. (The
# servers' tests ran with the unit tests, the longest process; they take ~90 s.)
E2E_ALONE := tests/e2e/test_chaos_short.py tests/e2e/test_region_loss.py tests/e2e/test_burst_cloud_cadence_local.py \
	tests/e2e/test_chaos_interrupted.py tests/e2e/test_retry_rate_local.py
OWN_SERVERS := $(sort $(wildcard tests/e2e/test_motopatch*.py)) tests/integration/test_api_schemathesis.py
# The integration tests (moto in process, the longest share: ~13 of the 19 minutes the unit,
# integration and infra process took on 2026-12-07, the unit and infra tests ~6) split by file
# name: the first third with the unit and infra tests, the rest in a process of its own beside
# the others (the two cores were 30 % idle while one process ran them all: the e2e processes
# mostly wait on the clock). On 2026-12-07, quiet: that process 14.4 min, the two thirds 11.6,
# the long e2e runs 17.2 with three integration files that now run with the two thirds instead.
INTEGRATION := $(filter-out $(OWN_SERVERS),$(sort $(wildcard tests/integration/test_*.py)))
INTEGRATION_CUT := $(shell echo $$(( $(words $(INTEGRATION)) / 3 )))
INTEGRATION_A := $(wordlist 1,$(INTEGRATION_CUT),$(INTEGRATION))
INTEGRATION_B := $(wordlist $(shell echo $$(( $(INTEGRATION_CUT) + 1 ))),$(words $(INTEGRATION)),$(INTEGRATION))

test: install lint docs browser
	@# Four pytest processes side by side: tests/e2e (real processes that mostly wait on the
	@# clock; one shared local mode, in file order, stopped by its last test), the long e2e runs
	@# with local modes of their own and the tests with servers of their own (in turn), the last
	@# two thirds of the integration tests, and everything else. The other reports are printed after
	@# this one's; the target fails if any process does.
	@set -u; log=$$(mktemp); alone=$$(mktemp); half=$$(mktemp); \
	$(BIN)/pytest -q -p no:cacheprovider tests/e2e $(E2E_ALONE:%=--ignore=%) $(OWN_SERVERS:%=--ignore=%) > "$$log" 2>&1 & e2e=$$!; \
	$(BIN)/pytest -q -p no:cacheprovider $(E2E_ALONE) $(OWN_SERVERS) > "$$alone" 2>&1 & long=$$!; \
	$(BIN)/pytest -q -p no:cacheprovider $(INTEGRATION_B) > "$$half" 2>&1 & second=$$!; \
	$(BIN)/pytest -q -p no:cacheprovider tests/unit tests/infra $(INTEGRATION_A); rest=$$?; \
	wait $$second; second_rc=$$?; wait $$e2e; e2e_rc=$$?; wait $$long; long_rc=$$?; \
	echo "--- tests/integration, the last two thirds (pytest exit $$second_rc)"; cat "$$half"; \
	echo "--- tests/e2e, shared local mode (pytest exit $$e2e_rc)"; cat "$$log"; \
	echo "--- tests/e2e, runs of their own (pytest exit $$long_rc)"; cat "$$alone"; rm -f "$$log" "$$alone" "$$half"; \
	test $$rest -eq 0 -a $$second_rc -eq 0 -a $$e2e_rc -eq 0 -a $$long_rc -eq 0

# The documentation site (mkdocs.yml, docs/, README.md as its home page) into site/. Strict: a
# broken link or anchor, a page missing from the nav or a marker mkdocs_hooks.py cannot expand
# fails the build. Offline (no plugin or theme feature that reaches the network).
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The console's browser test drives headless Chromium (Debian package): installed when missing.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }

# FRESH=1 starts empty (the state a clean stop kept is deleted); FRESH=0, no, false or off do not,
# capitalized too (make's filter is case-sensitive: FRESH=False deleted every saved job)
# RUN_ARGS: more options of punctual-local up, e.g. make run RUN_ARGS='--api-port 8090' when 8080 is taken
NOT_FRESH := 0 n N no No NO false False FALSE off Off OFF
RUN_ARGS ?=
run: install
	$(BIN)/punctual-local up $(if $(filter-out $(NOT_FRESH),$(FRESH)),--fresh) $(RUN_ARGS)

bench: install
	@start=$$(date +%s); set -e; \
	$(BIN)/python bench/schedule_bench.py; \
	$(BIN)/python bench/cpu_per_trigger.py; \
	$(BIN)/python bench/timer_packing.py; \
	$(BIN)/python bench/console_widget.py; \
	$(BIN)/python bench/audit_cost.py; \
	$(BIN)/python bench/standing_cost.py; \
	$(BIN)/python bench/cost_per_million.py; \
	$(BIN)/python bench/lease_cost.py; \
	$(BIN)/python bench/catchup_pace.py; \
	$(BIN)/python bench/capacity.py; \
	$(BIN)/python bench/registration_cost.py; \
	$(BIN)/python bench/crash_cost.py; \
	rm -f bench/results/local_mode.json; \
	$(BIN)/python bench/local_mode.py || echo "make bench: local mode benchmarks failed (reported as not run)"; \
	rm -f bench/results/fairness.json; \
	$(BIN)/python bench/fairness.py || echo "make bench: the fairness benchmark failed (reported as not run)"; \
	$(BIN)/python bench/report.py --elapsed-s $$(( $$(date +%s) - start )); \
	echo "make bench: $$(( $$(date +%s) - start )) s"

clean:
	rm -rf $(VENV) cdk.out build site .pytest_cache .mypy_cache .ruff_cache

# --- Infrastructure: the Lambda layer, the CDK app, deployment (infra/, cdk.json) ---------------
# CDK drives the npm CLI for deploy/destroy (node required; fetched by npx on first use).
# Extra arguments go in CDK_ARGS, e.g. make deploy CDK_ARGS='-c alarmEmails=ops@example.com'.
CDK ?= npx --yes aws-cdk@2
CDK_ARGS ?=

layer: install
	$(BIN)/python infra/build_layer.py

synth: layer
	$(BIN)/python infra/app.py
	@$(BIN)/python -c "import glob, json; [print(f'{p}: {len(json.load(open(p))[\"Resources\"])} resources, cdk-nag passed') for p in glob.glob('cdk.out/*.template.json')]"

deploy: layer
	$(CDK) deploy --require-approval broadening $(CDK_ARGS)

destroy: layer
	$(CDK) destroy $(CDK_ARGS)

# --- Chaos (local/chaos): kill -9, duplicated deliveries, skewed clocks, throttling, then a verdict ---
# The long run, then the sustained-fault phases (a kill every 2-4 s for a minute: of the pollers, of
# the workers, of both), each a run of its own; the short form is tests/e2e/test_chaos_short.py in
# `make test`. Each prints one line (slots, executed once, duplicates, missed, early, faults, fire
# delay p50/p99/max) after its fire delay by category; the target exits non-zero when any run had a
# violation, a p99 fire delay over 10 s included (--max-p99-delay-s S).
# Reproduce a run with its seed: make chaos CHAOS_ARGS='--seed 1234'; only some: CHAOS_PHASES=workers
# (CHAOS_MINUTES=0 skips the long run).
CHAOS_MINUTES ?= 10
CHAOS_PHASES ?= pollers workers both
CHAOS_ARGS ?=

chaos: install
	@set -u; rc=0; \
	if [ "$(CHAOS_MINUTES)" != "0" ]; then $(BIN)/python -m local.chaos run --minutes $(CHAOS_MINUTES) $(CHAOS_ARGS) || rc=1; fi; \
	for phase in $(CHAOS_PHASES); do $(BIN)/python -m local.chaos run --phase $$phase $(CHAOS_ARGS) || rc=1; done; \
	exit $$rc
