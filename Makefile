# Hyphae — the two commands first: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test lint fmt check bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall whenever a requirements file changes.
$(STAMP): requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

## run: venv, install, migrate, demo data, then web + worker + beat (Ctrl-C stops all)
run: $(STAMP)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py collectstatic --noinput --verbosity 0
	$(BIN)/python manage.py sync_roster
	$(BIN)/python manage.py bootstrap
	$(BIN)/honcho start --env var/local.env --procfile Procfile

## test: venv, install, the whole suite (PostgreSQL/Redis/browser parts run when configured)
test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

check: $(STAMP)
	$(BIN)/python manage.py check
	$(BIN)/python manage.py makemigrations --check --dry-run

clean:
	rm -rf $(VENV) var build
