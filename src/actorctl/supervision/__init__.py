"""Supervisors and strategies, restart intensity, (later) circuit breakers,
health checks, retry policies and boxed processes.

It sits between ``cluster`` and ``actors`` in the import order.
"""

from ._supervisor import ChildFailedToStart as ChildFailedToStart
from ._supervisor import ChildSpec as ChildSpec
from ._supervisor import Restart as Restart
from ._supervisor import Strategy as Strategy
from ._supervisor import Supervisor as Supervisor
from ._supervisor import SupervisorGaveUp as SupervisorGaveUp
