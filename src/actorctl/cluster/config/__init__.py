"""cluster.toml: read, checked, and turned into typed records."""
