"""The commands that run a cluster's processes (``node``, ``cluster``,
``host``) and make the keys and certificates they run with (``keys``,
``certs``)."""
