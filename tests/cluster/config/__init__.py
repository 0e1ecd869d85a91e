"""tests/cluster/config/: see tests/README.md."""
