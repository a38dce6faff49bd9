"""A module listed in HOST_EXTENSIONS by the registry and roster tests."""

from __future__ import annotations

from .exts import make_ext

notes = make_ext("notes", version="0.1.0")
