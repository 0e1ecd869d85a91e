"""tests/supervision/: see tests/README.md."""
