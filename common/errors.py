"""Errors meant for the user: the CLI prints them (never a traceback) and exits non-zero.

Every stage raises a subclass of :class:`UserError` for bad input. ``str(err)`` is the full
text to print; ``exit_code`` the process status (2 for bad input unless a command documents
another code).
"""
from __future__ import annotations


class UserError(Exception):
    """An error caused by the user's input, reported as text with a non-zero exit."""
    exit_code = 2
