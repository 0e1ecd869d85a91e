"""tests/etcd/: see tests/README.md."""
