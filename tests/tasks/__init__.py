"""tests/tasks/: see tests/README.md."""
