"""tests/cluster/: see tests/README.md."""
