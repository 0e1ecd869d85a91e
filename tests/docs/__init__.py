"""tests/docs/: see tests/README.md."""
