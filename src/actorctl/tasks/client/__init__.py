"""The caller's side: sending tasks, connecting to a cluster, the directory, results."""
