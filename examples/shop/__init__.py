"""A shop whose payments service is down, for the dead letters of
docs/fault-tolerance.md.

examples/shop/shop.toml runs a services node (its scheduler delays the
retries) and a worker node hosting the ``celery`` pool. ``shop.charge`` always
fails with ``ConnectionError`` and becomes an ``out-of-retries`` dead letter
after its third retry, about a second after it was sent; ``shop.refund`` fails
inside ``poisonous()`` and becomes a ``poison`` dead letter at once. Start it
with ``actorctl cluster up shop.toml`` in this directory (the repository's
root on PYTHONPATH), then call both tasks as the page does.
"""
