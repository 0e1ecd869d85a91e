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
from ._declare import SUPERVISOR_KEYS as SUPERVISOR_KEYS
from ._declare import check_keys as check_keys
from ._declare import child_from_table as child_from_table
from ._declare import supervisor_from_table as supervisor_from_table
from ._process import ProcessExited as ProcessExited
from ._specs import ActorSpec as ActorSpec
from ._specs import ProcessSpec as ProcessSpec
from ._specs import SupervisorSpec as SupervisorSpec
from ._specs import import_target as import_target
from ._supervisor import Supervisor as Supervisor
from ._tree import SupervisorActor as SupervisorActor
