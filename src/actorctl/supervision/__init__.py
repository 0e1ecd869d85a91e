"""Supervisors and strategies, restart intensity, supervision trees that users
declare, boxed (external) processes, and (later) circuit breakers, health
checks and retry policies.

It sits between ``cluster`` and ``actors`` in the import order.
"""

from ._child import ChildError as ChildError
from ._child import ChildFailedToStart as ChildFailedToStart
from ._child import ChildSpec as ChildSpec
from ._child import Restart as Restart
from ._child import Strategy as Strategy
from ._child import SupervisorGaveUp as SupervisorGaveUp
from ._supervisor import Supervisor as Supervisor
