"""Where settings come from: the process environment, then the project's `.env` file.

Every settings module imports `env` from here before it reads anything, so `.env` is loaded in
this one place and first: production can check its required variables and set its defaults on
top of it, and `config/celery.py` sees the same values through Django's settings. A variable set
in the environment always wins over the same name in `.env`.
"""

from __future__ import annotations

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()
# overwrite=False: the process environment wins; `.env` only fills in what it leaves unset
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)
