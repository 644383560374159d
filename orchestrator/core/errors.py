"""The error a user can fix: bad input or state found before (or instead of) running.

The CLI prints its message, without a traceback, and exits 2. Everything else that
goes wrong is a bug or an infrastructure failure and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input (a config value, a path, an unset variable) or a busy output root; the
    message says which key or file and what to do."""
