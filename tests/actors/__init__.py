"""tests/actors/: see tests/README.md."""
