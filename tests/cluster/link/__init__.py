"""tests/cluster/link/: see tests/README.md."""
