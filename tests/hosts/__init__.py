"""tests/hosts/: see tests/README.md."""
