"""A node's standing among the others: its membership of a cluster that spans
hosts (its record and lease in etcd, routing by the directory: ``_member.py``),
its fence while that membership may have ended (``_fence.py``), and role
leases on one host (the Controller's table: ``_leases.py``)."""
