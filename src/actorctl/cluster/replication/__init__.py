"""Primary-backup replication of a node's store to standbys on other hosts,
fenced by a role's revision: the shipper (``_shipper.py``, on the primary) and
the replica keeper (``_replica.py``, on each standby)."""
