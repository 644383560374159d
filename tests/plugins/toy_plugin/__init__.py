"""A benchmark of another package, for tests: it lives outside distillery's source tree
and reaches distillery only through entry points (see tests/plugins/__init__.py)."""
