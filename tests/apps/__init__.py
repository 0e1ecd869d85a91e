"""tests/apps/: see tests/README.md."""
