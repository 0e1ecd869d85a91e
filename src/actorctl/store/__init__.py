"""The node's durable store: SQLite with group commits, off the event loop's thread."""

from ._store import Store as Store
