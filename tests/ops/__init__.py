"""tests/ops/: see tests/README.md."""
