"""The example extensions' tests: the author harness, and each example's source folder on the
path (as `pip install -e examples/<name>` would make it importable)."""

from __future__ import annotations

import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent

for folder in sorted(EXAMPLES.iterdir()):
    if (folder / "pyproject.toml").is_file() and str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

pytest_plugins = ["extensions_host.testing"]
