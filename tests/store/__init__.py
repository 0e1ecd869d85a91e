"""tests/store/: see tests/README.md."""
