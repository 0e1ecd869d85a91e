"""The way out of a node: its outbox (every message it sends, the reply table
and routes: ``_outbox.py``), the backlog of what it has taken on to send
(``_backlog.py``), and its idle outgoing connections (``_idle.py``)."""
