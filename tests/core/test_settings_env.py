"""Settings as an operator meets them: `.env` honoured everywhere (production, beat, make run),
bad values refused at start with the variable's name, production's database and cache enforced.

Each test loads the settings in a fresh process from a project folder whose `config` package is
a copy (so its BASE_DIR, and the `.env` it reads, is that folder); every other package comes
from this checkout through PYTHONPATH.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PRODUCTION_REQUIRED = {
    "SECRET_KEY": "x7Gq2vN9pL4sT8wB1mK6rY3zH5jD0cF9aE2uQ7iO4nV8gS1bW6tX3yR5kM0lP9dZ",
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/hyphae",
    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
    "CACHE_URL": "redis://127.0.0.1:6379/1",
    "ALLOWED_HOSTS": "hyphae.example.com",
}

CACHE_ACCEPTS = (
    "CACHE_URL must be redis://host:port/db, rediss://…, filecache:///<path>, locmemcache:// "
    "or another django-environ cache URL"
)

# the keys production defaults only where neither the environment nor `.env` sets them
PRODUCTION_DEFAULTED = ("HOST_AUTO_ADMIT", "AGENT_RUNTIME", "LOG_JSON")

SHOW = """
import json
from django.conf import settings
print(json.dumps({name: getattr(settings, name) for name in %r}, default=str))
"""

LOAD = "from django.conf import settings; settings.INSTALLED_APPS"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    shutil.copytree(
        ROOT / "config", folder / "config", ignore=shutil.ignore_patterns("__pycache__")
    )
    return folder


def python(
    project: Path, code: str, *, module: str = "config.settings.base", dotenv: str = "", **env: str
) -> subprocess.CompletedProcess:
    if dotenv:
        (project / ".env").write_text(dotenv)
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),  # after the project folder, which `-c` puts first
        "DJANGO_SETTINGS_MODULE": module,
        **env,
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def show(project: Path, *names: str, **kwargs: str) -> dict:
    done = python(project, SHOW % (names,), **kwargs)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def dotenv(values: dict[str, str]) -> str:
    return "".join(f"{name}={value}\n" for name, value in values.items())


# --- .env is read first, in one place --------------------------------------------------------


def test_production_takes_its_required_settings_from_dotenv(project):
    values = show(
        project,
        "SECRET_KEY",
        "ALLOWED_HOSTS",
        module="config.settings.production",
        dotenv=dotenv(PRODUCTION_REQUIRED),
    )
    assert values == {
        "SECRET_KEY": PRODUCTION_REQUIRED["SECRET_KEY"],
        "ALLOWED_HOSTS": ["hyphae.example.com"],
    }


def test_production_keeps_dotenv_values_of_the_keys_it_defaults(project):
    overrides = {"HOST_AUTO_ADMIT": "true", "AGENT_RUNTIME": "echo", "LOG_JSON": "false"}
    values = show(
        project,
        *PRODUCTION_DEFAULTED,
        module="config.settings.production",
        dotenv=dotenv(PRODUCTION_REQUIRED | overrides),
    )
    assert values == {"HOST_AUTO_ADMIT": True, "AGENT_RUNTIME": "echo", "LOG_JSON": False}


def test_production_defaults_apply_when_neither_the_environment_nor_dotenv_sets_them(project):
    values = show(
        project,
        *PRODUCTION_DEFAULTED,
        module="config.settings.production",
        dotenv=dotenv(PRODUCTION_REQUIRED),
    )
    assert values == {"HOST_AUTO_ADMIT": False, "AGENT_RUNTIME": "external", "LOG_JSON": True}


def test_the_environment_wins_over_dotenv(project):
    values = show(
        project,
        "SECRET_KEY",
        "AGENT_RUNTIME",
        module="config.settings.production",
        dotenv=dotenv(PRODUCTION_REQUIRED | {"AGENT_RUNTIME": "echo"}),
        SECRET_KEY="from-the-environment-" + "k" * 40,
        AGENT_RUNTIME="external",
    )
    assert values == {"SECRET_KEY": "from-the-environment-" + "k" * 40, "AGENT_RUNTIME": "external"}


def test_production_still_refuses_to_start_when_dotenv_lacks_a_required_setting(project):
    required = dict(PRODUCTION_REQUIRED)
    del required["CACHE_URL"]
    done = python(project, LOAD, module="config.settings.production", dotenv=dotenv(required))
    assert done.returncode != 0
    assert "ImproperlyConfigured: CACHE_URL must be set in production" in done.stderr


def test_production_refuses_a_sqlite_database(project):
    done = python(
        project,
        LOAD,
        module="config.settings.production",
        dotenv=dotenv(PRODUCTION_REQUIRED | {"DATABASE_URL": f"sqlite:///{project}/db.sqlite3"}),
    )
    assert done.returncode != 0
    assert (
        "ImproperlyConfigured: DATABASE_URL must point at PostgreSQL in production" in done.stderr
    )


@pytest.mark.parametrize(
    "cache_url", ["filecache:///var/cache/hyphae", "locmemcache://", "dummycache://"]
)
def test_production_refuses_a_cache_that_is_not_redis(project, cache_url):
    """`save=none` artifact payloads live in the cache (with the file cache, in each process's
    memory): every web process must share it."""
    done = python(
        project,
        LOAD,
        module="config.settings.production",
        dotenv=dotenv(PRODUCTION_REQUIRED | {"CACHE_URL": cache_url}),
    )
    assert done.returncode != 0
    assert "ImproperlyConfigured: CACHE_URL must point at Redis in production" in done.stderr


@pytest.mark.parametrize(
    "broker_url",
    [
        "filesystem://",
        "memory://",
        "redis//typo",
        "sqs://key:s3cret@",
        "librabbitmq://guest:s3cret@rabbit//",
        "redis://redis.internal:6379/0;filesystem://",
    ],
)
def test_production_refuses_a_broker_that_is_not_redis_or_rabbitmq(project, broker_url):
    """The embedded brokers serve one machine and never redeliver a dead worker's task."""
    done = python(
        project,
        LOAD,
        module="config.settings.production",
        dotenv=dotenv(PRODUCTION_REQUIRED | {"CELERY_BROKER_URL": broker_url}),
    )
    assert done.returncode != 0
    assert (
        "ImproperlyConfigured: CELERY_BROKER_URL must point at Redis or RabbitMQ in production "
        "(redis://, rediss://, sentinel://, amqp://, amqps://, pyamqp://)" in done.stderr
    )
    assert "s3cret" not in done.stderr  # the scheme is named, never the rest of the URL


@pytest.mark.parametrize(
    "broker_url",
    [
        "redis://redis.internal:6379/0",
        "rediss://:pw@redis.internal:6380/0",
        "amqp://guest:guest@rabbit:5672//",
        "amqps://guest:guest@rabbit:5671//",
        "pyamqp://guest:guest@rabbit//",
        "amqp://rabbit-a//;amqp://rabbit-b//",
        "sentinel://sentinel-a:26379;sentinel://sentinel-b:26379",
        "redis+socket:///run/redis/redis.sock",
    ],
)
def test_production_takes_a_redis_or_rabbitmq_broker(project, broker_url):
    values = show(
        project,
        "CELERY_BROKER_URL",
        module="config.settings.production",
        dotenv=dotenv(PRODUCTION_REQUIRED | {"CELERY_BROKER_URL": broker_url}),
    )
    assert values["CELERY_BROKER_URL"] == broker_url


def test_production_takes_a_redis_cache_for_the_artifact_payloads_too(project):
    values = show(
        project,
        "CACHES",
        module="config.settings.production",
        dotenv=dotenv(PRODUCTION_REQUIRED | {"CACHE_URL": "rediss://redis.internal:6380/1"}),
    )
    assert values["CACHES"]["artifacts"] == values["CACHES"]["default"]
    assert values["CACHES"]["default"]["LOCATION"] == "rediss://redis.internal:6380/1"
    # a Redis that never answers fails a call instead of hanging it (beat's mark included)
    assert values["CACHES"]["default"]["OPTIONS"] == {
        "socket_connect_timeout": 2,
        "socket_timeout": 5,
    }


def test_beat_ticks_at_the_interval_dotenv_sets(project):
    code = (
        "from django.conf import settings\n"
        "from config.celery import app\n"
        "schedule = app.conf.beat_schedule\n"
        "print(settings.CELERY_BEAT_INTERVAL_SECONDS, schedule['fire-timers']['schedule'],"
        " schedule['run-jobs']['schedule'])\n"
    )
    done = python(project, code, dotenv="CELERY_BEAT_INTERVAL_SECONDS=7\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["7.0", "7.0", "7.0"]


# --- bad values are refused at start, naming the variable ------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("HOST_WRITE_RATE", "garbage", "HOST_WRITE_RATE must be <count>/<s|sec|second|m|min"),
        ("HOST_WRITE_RATE", "10/fortnight", "HOST_WRITE_RATE must be <count>/<s|sec|second|m|min"),
        ("HOST_WRITE_RATE", "0/min", "HOST_WRITE_RATE must be <count>/"),
        ("RETENTION_DAYS", "0", "RETENTION_DAYS must be an integer >= 1, got 0"),
        ("RETENTION_DAYS", "-3", "RETENTION_DAYS must be an integer >= 1, got -3"),
        ("RETENTION_DAYS", "abc", "RETENTION_DAYS must be an integer >= 1, got 'abc'"),
        ("IDLE_AFTER_SECONDS", "soon", "IDLE_AFTER_SECONDS must be an integer >= 1"),
        # 0 would make the hourly prune delete every finished notification
        (
            "HOST_NOTIFICATION_RETENTION_DAYS",
            "0",
            "HOST_NOTIFICATION_RETENTION_DAYS must be an integer >= 1, got 0",
        ),
        (
            "HOST_NOTIFICATION_RETENTION_DAYS",
            "month",
            "HOST_NOTIFICATION_RETENTION_DAYS must be an integer >= 1, got 'month'",
        ),
        # "keep forever" is the unset default, never 0 (which would delete every host call's entry)
        (
            "HOST_AUDIT_HOST_CALLS_RETENTION_DAYS",
            "0",
            "HOST_AUDIT_HOST_CALLS_RETENTION_DAYS must be an integer >= 1, got 0",
        ),
        (
            "HOST_AUDIT_HOST_CALLS_RETENTION_DAYS",
            "forever",
            "HOST_AUDIT_HOST_CALLS_RETENTION_DAYS must be an integer >= 1, got 'forever'",
        ),
        ("CELERY_BEAT_INTERVAL_SECONDS", "0", "CELERY_BEAT_INTERVAL_SECONDS must be a number > 0"),
        ("CELERY_BEAT_INTERVAL_SECONDS", "fast", "CELERY_BEAT_INTERVAL_SECONDS must be a number"),
        ("HOST_SSE_POLL_SECONDS", "0", "HOST_SSE_POLL_SECONDS must be a number > 0 and <= 60"),
        ("HOST_SSE_POLL_SECONDS", "nan", "HOST_SSE_POLL_SECONDS must be a number > 0 and <= 60"),
        ("HOST_SSE_KEEPALIVE_SECONDS", "inf", "HOST_SSE_KEEPALIVE_SECONDS must be a number > 0"),
        ("HOST_SSE_LIFETIME_SECONDS", "-1", "HOST_SSE_LIFETIME_SECONDS must be a number > 0"),
        ("HOST_WATCH_POLL_SECONDS", "11", "HOST_WATCH_POLL_SECONDS must be a number > 0 and <= 10"),
        ("LOG_LEVEL", "loud", "LOG_LEVEL must be a logging level name"),
        # beat writes its mark every 5 s: below three marks /readyz would flap
        ("BEAT_STALE_SECONDS", "1", "BEAT_STALE_SECONDS must be an integer >= 15, got 1"),
        ("BEAT_STALE_SECONDS", "14", "BEAT_STALE_SECONDS must be an integer >= 15, got 14"),
        ("DATABASE_URL", "notaurl", "DATABASE_URL must be sqlite:///<path> or postgres://"),
        ("DATABASE_URL", "postgres//db/hyphae", "DATABASE_URL must be sqlite:///<path> or"),
        # the scheme only: never the password
        (
            "DATABASE_URL",
            "foo://u:hunter2@db/h",
            "DATABASE_URL must be sqlite:///<path> or postgres://user@host:port/name, got foo://\n",
        ),
        ("DATABASE_URL", "postgres://u@db:port/h", "DATABASE_URL must be sqlite:///<path> or"),
        # `scheme:/…` would parse as a database named after a path
        (
            "DATABASE_URL",
            "postgres:/127.0.0.1/db",
            "DATABASE_URL must be sqlite:///<path> or postgres://user@host:port/name, "
            "got a value without <scheme>://\n",
        ),
        # PostGIS is no engine of Hyphae's (production agrees: test below)
        ("DATABASE_URL", "postgis://u:hunter2@db/h", "DATABASE_URL must be sqlite:///<path> or"),
        ("CACHE_URL", "foo://u:hunter2@x", f"{CACHE_ACCEPTS}, got foo://\n"),
        ("CACHE_URL", "rediss//:hunter2@h", f"{CACHE_ACCEPTS}, got a value without <scheme>://"),
        # not a Unix socket: a typo
        ("CACHE_URL", "redis:/x", f"{CACHE_ACCEPTS}, got a value without <scheme>://"),
        ("CELERY_BROKER_URL", "redis:/hunter2", "CELERY_BROKER_URL must be <scheme>://"),
        ("HOST_PUBLIC_URL", "hyphae.example.com", "HOST_PUBLIC_URL must be an http:// or https://"),
        (
            "HOST_HOOK_DEADLINE_WORKER_MS",
            "400000",
            "HOST_HOOK_DEADLINE_WORKER_MS must be an integer >= 1 and <= 300000, got 400000",
        ),
        (
            "HOST_HOOK_DEADLINE_REQUEST_MS",
            "300001",
            "HOST_HOOK_DEADLINE_REQUEST_MS must be an integer >= 1 and <= 300000, got 300001",
        ),
        ("DEBUG", "maybe", "DEBUG must be true or false (also 1/0, yes/no, on/off), got 'maybe'"),
        ("HOST_AUTH", "off", "HOST_AUTH must be 'on' or 'none', got 'off'"),
        ("AGENT_RUNTIME", "llm", "AGENT_RUNTIME must be 'echo' or 'external', got 'llm'"),
        (
            "PROMETHEUS_MULTIPROC_DIR",
            "/nonexistent/metrics",
            "PROMETHEUS_MULTIPROC_DIR must be an existing folder (create it before the processes "
            "start), got '/nonexistent/metrics'",
        ),
    ],
)
def test_a_bad_value_is_refused_at_start_naming_the_variable(project, name, value, message):
    done = python(project, LOAD, **{name: value})
    assert done.returncode != 0
    assert f"django.core.exceptions.ImproperlyConfigured: {message}" in done.stderr
    assert "hunter2" not in done.stderr
    assert "Invalid cache schema" not in done.stderr  # the parser's words, without the name


def test_the_retention_settings_default_to_30_days_and_to_keeping_host_calls_forever(project):
    assert show(
        project, "HOST_NOTIFICATION_RETENTION_DAYS", "HOST_AUDIT_HOST_CALLS_RETENTION_DAYS"
    ) == {"HOST_NOTIFICATION_RETENTION_DAYS": 30, "HOST_AUDIT_HOST_CALLS_RETENTION_DAYS": None}
    assert show(
        project,
        "HOST_NOTIFICATION_RETENTION_DAYS",
        "HOST_AUDIT_HOST_CALLS_RETENTION_DAYS",
        HOST_NOTIFICATION_RETENTION_DAYS="7",
        HOST_AUDIT_HOST_CALLS_RETENTION_DAYS="",  # empty: unset, kept forever
    ) == {"HOST_NOTIFICATION_RETENTION_DAYS": 7, "HOST_AUDIT_HOST_CALLS_RETENTION_DAYS": None}
    assert show(
        project, "HOST_AUDIT_HOST_CALLS_RETENTION_DAYS", HOST_AUDIT_HOST_CALLS_RETENTION_DAYS="90"
    ) == {"HOST_AUDIT_HOST_CALLS_RETENTION_DAYS": 90}


def test_a_wake_horizon_at_the_visibility_timeout_is_refused_naming_both(project):
    done = python(
        project,
        LOAD,
        CELERY_BROKER_URL="redis://127.0.0.1:6379/0",
        HOST_WAKE_HORIZON_SECONDS="3600",
    )
    assert done.returncode != 0
    assert (
        "ImproperlyConfigured: HOST_WAKE_HORIZON_SECONDS must be below the broker's visibility "
        "timeout (3600 s), got 3600" in done.stderr
    )


def test_production_refuses_postgis_as_base_does(project):
    done = python(
        project,
        LOAD,
        module="config.settings.production",
        dotenv=dotenv(PRODUCTION_REQUIRED | {"DATABASE_URL": "postgis://postgres@db:5432/h"}),
    )
    assert done.returncode != 0
    assert "ImproperlyConfigured: DATABASE_URL must be sqlite:///<path> or postgres://" in (
        done.stderr
    )


def test_hsts_subdomains_and_preload_are_on_by_default_and_may_be_turned_off(project):
    names = ("SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_HSTS_PRELOAD")
    values = show(
        project, *names, module="config.settings.production", dotenv=dotenv(PRODUCTION_REQUIRED)
    )
    assert values == {
        "SECURE_HSTS_SECONDS": 31536000,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
        "SECURE_HSTS_PRELOAD": True,
    }
    off = PRODUCTION_REQUIRED | {
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": "false",
        "SECURE_HSTS_PRELOAD": "false",
    }
    values = show(project, *names[1:], module="config.settings.production", dotenv=dotenv(off))
    assert values == {"SECURE_HSTS_INCLUDE_SUBDOMAINS": False, "SECURE_HSTS_PRELOAD": False}


def test_an_empty_folder_setting_means_its_default_not_the_working_directory(project):
    # a blank line in .env or a blank CI variable: `Path("")` would be "." and put the SQLite
    # database, the broker's folders, static files and beat's schedule wherever it started
    values = show(project, "VAR_DIR", "HOST_DATA_DIR", HOST_VAR_DIR=" ", HOST_DATA_DIR="")
    assert values == {"VAR_DIR": str(project / "var"), "HOST_DATA_DIR": str(project / "var/data")}


def test_the_sweep_soft_time_limit_covers_the_budget_and_a_page_of_the_longest_deadline(project):
    # a sweep's last page may run 300 s: every hook has its whole deadline, up to 300 s
    values = show(
        project,
        "HOST_SWEEP_BUDGET_SECONDS",
        "HOST_SWEEP_SOFT_TIME_LIMIT_SECONDS",
        HOST_SWEEP_BUDGET_SECONDS="20",
        HOST_HOOK_DEADLINE_WORKER_MS="40000",
    )
    assert values["HOST_SWEEP_SOFT_TIME_LIMIT_SECONDS"] == 20 + 300 + 15


def test_a_sweep_budget_above_a_minute_is_refused(project):
    done = python(project, LOAD, HOST_SWEEP_BUDGET_SECONDS="61")
    assert done.returncode != 0
    assert (
        "ImproperlyConfigured: HOST_SWEEP_BUDGET_SECONDS must be an integer >= 1 and <= 60, got 61"
        in done.stderr
    )


def test_good_values_are_read_and_normalised(project):
    values = show(
        project,
        "RETENTION_DAYS",
        "HOST_WRITE_RATE",
        "REST_FRAMEWORK",
        "LOG_LEVEL",
        "HOST_SWEEP_BUDGET_SECONDS",
        "HOST_SSE_POLL_SECONDS",
        "BEAT_STALE_SECONDS",
        RETENTION_DAYS="30",
        HOST_WRITE_RATE=" 20/Second ",
        LOG_LEVEL="debug",
        HOST_SWEEP_BUDGET_SECONDS="14",
        HOST_SSE_POLL_SECONDS="0.25",
        BEAT_STALE_SECONDS="15",
    )
    assert values["RETENTION_DAYS"] == 30
    assert values["HOST_WRITE_RATE"] == "20/second"
    assert values["REST_FRAMEWORK"]["DEFAULT_THROTTLE_RATES"] == {"writes": "20/second"}
    assert values["LOG_LEVEL"] == "DEBUG"
    assert values["HOST_SWEEP_BUDGET_SECONDS"] == 14
    assert values["HOST_SSE_POLL_SECONDS"] == 0.25
    assert values["BEAT_STALE_SECONDS"] == 15


def test_only_the_asgi_process_pools_and_on_postgresql_only(project):
    postgres = "postgres://postgres@127.0.0.1:5432/hyphae"
    asgi = {"DATABASE_URL": postgres, "HYPHAE_PROCESS": "asgi"}
    pooled = show(project, "DATABASES", **asgi)
    from_dotenv = show(project, "DATABASES", dotenv="DATABASE_POOL_SIZE=5\n", **asgi)
    off = show(project, "DATABASES", DATABASE_POOL_SIZE="0", **asgi)
    # a Celery worker or gunicorn would share a pool's sockets across its forks
    other = show(project, "DATABASES", DATABASE_URL=postgres, DATABASE_POOL_SIZE="5")
    embedded = show(project, "DATABASES", HYPHAE_PROCESS="asgi")
    refused = python(project, LOAD, DATABASE_URL=postgres, DATABASE_POOL_SIZE="-1")

    database = pooled["DATABASES"]["default"]
    assert database["CONN_MAX_AGE"] == 0  # Django refuses a pool beside persistent connections
    assert database["OPTIONS"]["pool"] == {"min_size": 1, "max_size": 8, "timeout": 5}
    assert from_dotenv["DATABASES"]["default"]["OPTIONS"]["pool"]["max_size"] == 5
    for persistent in (off, other):
        assert "pool" not in persistent["DATABASES"]["default"].get("OPTIONS", {})
        assert persistent["DATABASES"]["default"]["CONN_MAX_AGE"] == 60
    assert "pool" not in embedded["DATABASES"]["default"]["OPTIONS"]
    assert "DATABASE_POOL_SIZE must be an integer >= 0 and <= 1000, got -1\n" in refused.stderr


def test_unset_retention_keeps_conversations_and_off_turns_the_write_rate_off(project):
    values = show(project, "RETENTION_DAYS", "REST_FRAMEWORK", HOST_WRITE_RATE="off")
    assert values["RETENTION_DAYS"] is None
    assert values["REST_FRAMEWORK"]["DEFAULT_THROTTLE_RATES"] == {"writes": None}


# --- make run and the Procfile use HOST_VAR_DIR ----------------------------------------------


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_run_finds_local_env_under_the_var_dir_of_the_settings(project):
    shutil.copy(ROOT / "Makefile", project / "Makefile")
    (project / ".venv").symlink_to(ROOT / ".venv")
    (project / ".env").write_text("HOST_VAR_DIR=/srv/hyphae-var\n")
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),
    }
    printed = subprocess.run(
        ["make", "-s", "--eval", "print-var-dir: ; @$(SETTINGS_VAR_DIR)", "print-var-dir"],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.strip() == "/srv/hyphae-var"
    recipe = subprocess.run(
        ["make", "-n", "-o", ".venv/.installed", "run"],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    honcho = next(line for line in recipe.stdout.splitlines() if "honcho start" in line)
    assert '--env "$var_dir/local.env"' in honcho


@pytest.mark.parametrize("var_dir", [None, "elsewhere"])
def test_beat_keeps_its_schedule_under_host_var_dir_with_no_option(project, var_dir):
    """The documented `celery -A config beat` (operating.md) and the Procfile's beat pass no
    `--schedule`: the settings put the schedule file in HOST_VAR_DIR, not the working folder."""
    line = next(
        line for line in (ROOT / "Procfile").read_text().splitlines() if line.startswith("beat:")
    )
    assert "--schedule" not in line and " -s " not in line
    code = (
        "from config.celery import app\n"
        "print(app.conf.beat_schedule_filename, app.conf.beat_scheduler)\n"
    )
    # the embedded settings make the broker's folders there: a folder of the test's own
    expected = str(project / (var_dir or "var"))
    done = python(project, code, **({"HOST_VAR_DIR": expected} if var_dir else {}))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [f"{expected}/celerybeat-schedule", "core.beat:HostScheduler"]


# --- the embedded broker keeps up with beat ----------------------------------------------------

WORKER = (
    "from config.celery import app\n"
    "from django.conf import settings\n"
    "import os\n"
    "folders = sorted(os.listdir(settings.VAR_DIR / 'broker'))"
    " if settings.CELERY_BROKER_URL.startswith('filesystem') else []\n"
    "print(app.conf.worker_prefetch_multiplier, app.conf.beat_schedule['fire-timers']"
    "['options']['expires'], ','.join(folders) or '-')\n"
)


def test_the_filesystem_broker_reserves_enough_tasks_and_makes_its_folders(project):
    # one reserved task per process caps a filesystem-broker worker at ~1 task/s, slower
    # than beat's sweeps arrive; its folders must exist before the first enqueue
    done = python(project, WORKER)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["16", "30.0", "control,processed,queue"]
    assert (project / "var" / "static").is_dir()  # no whitenoise warning on start


def test_a_real_broker_reserves_one_task_per_process_and_stale_sweeps_expire(project):
    done = python(project, WORKER, CELERY_BROKER_URL="redis://127.0.0.1:6379/0")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "30.0", "-"]
    slow = python(
        project,
        WORKER,
        CELERY_BROKER_URL="redis://127.0.0.1:6379/0",
        CELERY_BEAT_INTERVAL_SECONDS="5",
    )
    assert slow.stdout.split()[1] == "50.0"


def _names_read_by_settings() -> set[str]:
    """Every upper-case name the settings modules pass as a call's first argument: the
    environment variables they read (through `env.*` or the helpers that wrap it)."""
    names = set()
    for path in (ROOT / "config" / "settings").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    if re.fullmatch(r"[A-Z][A-Z0-9_]+", first.value):
                        names.add(first.value)
    # dictionary keys read from DATABASES; the ASGI entry point's own marker (not a setting)
    return names - {"ENGINE", "OPTIONS", "HYPHAE_PROCESS"}


def _names_in_the_readme_settings_table() -> set[str]:
    rows = [
        line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `")
    ]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}


def test_the_readme_settings_table_names_every_variable_the_settings_read_and_no_other():
    read, documented = _names_read_by_settings(), _names_in_the_readme_settings_table()

    assert "HOST_SWEEP_BUDGET_SECONDS" in read  # read through a helper, not `env.*` directly
    assert read - documented == set(), "read by config/settings but missing from README's table"
    assert documented - read == set(), "in README's settings table but read by no setting"
