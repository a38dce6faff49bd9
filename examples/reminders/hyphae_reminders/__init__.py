"""Hyphae example extension `reminders` (see `extension.py`)."""
