"""tests/testing/: see tests/README.md."""
