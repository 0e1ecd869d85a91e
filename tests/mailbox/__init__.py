"""tests/mailbox/: see tests/README.md."""
