"""tests/project/: see tests/README.md."""
