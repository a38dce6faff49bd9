"""Hyphae example extension `digest` (see `extension.py`)."""
