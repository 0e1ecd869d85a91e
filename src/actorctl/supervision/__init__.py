"""Supervisors, restart strategies, circuit breakers, retry policies.

Thin for now: the supervision issue fills it in. It sits between ``cluster``
and ``actors`` in the import order.
"""
