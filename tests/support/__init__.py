"""tests/support/: see tests/README.md."""
