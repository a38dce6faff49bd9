"""Hyphae example extension `approvals` (see `extension.py`)."""
