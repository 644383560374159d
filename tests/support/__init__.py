"""Test-only helpers; the scripted server and its scripts live in distillery.testing."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
