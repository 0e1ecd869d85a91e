"""The two apps of docs/scheduling.md, each with a cluster that runs it.

- reports.py, run by reports.toml: the page's periodic tasks (``refresh``,
  ``digest``, and the ``cleanup`` and ``ping`` that the file's
  ``[[periodic]]`` tables fire); ``actorctl schedule list reports.toml``
  lists them.
- tasks.py, run by tasks.toml (a services node and two workers, ``w1`` and
  ``w2``): the page's rate-limited and concurrency-limited tasks, for
  ``actorctl control rate-limit``, ``suspend`` and ``resume``.

Start either with ``actorctl cluster up FILE`` in this directory (the
repository's root on PYTHONPATH); development certificates and keys are made
beside it.
"""
