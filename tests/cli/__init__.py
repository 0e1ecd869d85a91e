"""tests/cli/: see tests/README.md."""
