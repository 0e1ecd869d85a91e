"""The operator's commands on a running cluster: one call (``call``,
``send``), ``control``, ``inspect``, ``deadletters``, ``schedule``, and one
task's trace from the nodes' logs (``logs``)."""
