# Hyphae — the two commands first: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test lint fmt check bench fuzz clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall whenever a requirements file changes.
$(STAMP): requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

# The bundled example extensions: `make run` installs reminders, digest and approvals by listing
# them in HOST_EXTENSIONS (their source folders go on the path), so the test suite's environment
# never discovers them. chaos is importable but installed only when you list it yourself:
#   make run HOST_EXTENSIONS=hyphae_chaos.extension:chaos
comma := ,
EXAMPLES_PATH := $(CURDIR)/examples/reminders:$(CURDIR)/examples/digest:$(CURDIR)/examples/approvals:$(CURDIR)/examples/chaos
DEMO_EXTENSIONS := hyphae_reminders.extension:reminders,hyphae_digest.extension:digest,hyphae_approvals.extension:approvals

# The folder embedded mode writes to, as the settings resolve it (HOST_VAR_DIR from the
# environment or .env, default var/): bootstrap writes local.env there, and `run` exports it
# so the Procfile's beat keeps its schedule there too. A command, run by the recipe itself.
SETTINGS_VAR_DIR = $(BIN)/python -c 'from config.settings.base import VAR_DIR; print(VAR_DIR)'

## run: venv, install, migrate, demo data, then web + worker + beat (Ctrl-C stops all)
run: override export HOST_EXTENSIONS := $(DEMO_EXTENSIONS)$(if $(HOST_EXTENSIONS),$(comma)$(HOST_EXTENSIONS))
run: export PYTHONPATH := $(EXAMPLES_PATH)$(if $(PYTHONPATH),:$(PYTHONPATH))
run: $(STAMP)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py collectstatic --noinput --verbosity 0
	$(BIN)/python manage.py sync_roster
	$(BIN)/python manage.py bootstrap
	var_dir="$$($(SETTINGS_VAR_DIR))" && HOST_VAR_DIR="$$var_dir" \
		$(BIN)/honcho start --env "$$var_dir/local.env" --procfile Procfile

## test: venv, install, the whole suite (PostgreSQL/Redis/browser parts run when configured)
test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The Python files git knows of (django-upgrade takes file names, not folders)
PY_FILES = $$(git ls-files '*.py' 2>/dev/null || find . -name '*.py' -not -path './.venv/*')

## lint: ruff, ruff format, django-upgrade and mypy, as CI runs them (the pre-commit hooks too)
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/django-upgrade --target-version 5.2 --check $(PY_FILES)
	$(BIN)/mypy

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .
	$(BIN)/django-upgrade --target-version 5.2 $(PY_FILES) || true

check: $(STAMP)
	$(BIN)/python manage.py check
	$(BIN)/python manage.py makemigrations --check --dry-run

## bench: benchmarks beside their baselines on PostgreSQL + Redis (BENCH_QUICK=1: ~3 min)
bench: $(STAMP)
	BENCH_QUICK=$(BENCH_QUICK) BENCH_SECONDS=$(BENCH_SECONDS) $(BIN)/python -m bench.runner

## fuzz: schemathesis on every operation with >= 100 examples each, all checks, stateful on (PostgreSQL when DATABASE_URL is set)
fuzz: $(STAMP)
	FUZZ_EXAMPLES=$(or $(FUZZ_EXAMPLES),100) FUZZ_RANDOM=1 $(BIN)/python -m pytest tests/fuzz -s $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) var build
