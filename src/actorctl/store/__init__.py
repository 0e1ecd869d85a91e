"""The node's durable store: SQLite with group commits, off the event loop's thread."""

from ._shipping import Shipper as Shipper
from ._shipping import ShipRefused as ShipRefused
from ._shipping import Write as Write
from ._store import Store as Store
