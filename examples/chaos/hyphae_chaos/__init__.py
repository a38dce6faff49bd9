"""Hyphae example extension `chaos` (see `extension.py`). Never installed by default."""
