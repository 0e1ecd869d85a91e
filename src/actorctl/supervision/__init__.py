"""Supervisors and strategies, restart intensity, supervision trees that users
declare, boxed (external) processes, circuit breakers and health checks (and,
later, retry policies).

It sits between ``cluster`` and ``actors`` in the import order.
"""

from ._boxed import Boxed as Boxed
from ._boxed import BoxedUnavailable as BoxedUnavailable
from ._boxed_actor import BoxedActor as BoxedActor
from ._boxed_spec import BoxedSpec as BoxedSpec
from ._breaker import CIRCUIT_OPEN as CIRCUIT_OPEN
from ._breaker import Breaker as Breaker
from ._breaker import BreakerPolicy as BreakerPolicy
from ._breaker import BreakerState as BreakerState
from ._breaker import CircuitBreaker as CircuitBreaker
from ._breaker import Health as Health
from ._child import ChildError as ChildError
from ._child import ChildFailedToStart as ChildFailedToStart
from ._child import ChildSpec as ChildSpec
from ._child import ChildState as ChildState
from ._child import Restart as Restart
from ._child import Strategy as Strategy
from ._child import SupervisorGaveUp as SupervisorGaveUp
from ._declare import CHILD_KEYS as CHILD_KEYS
from ._declare import SUPERVISOR_KEYS as SUPERVISOR_KEYS
from ._declare import check_keys as check_keys
from ._declare import child_from_table as child_from_table
from ._declare import key_error as key_error
from ._declare import supervisor_from_table as supervisor_from_table
from ._health import HEALTH_AGENT as HEALTH_AGENT
from ._health import HealthCheck as HealthCheck
from ._health import HealthMonitor as HealthMonitor
from ._health import certificate_expiry as certificate_expiry
from ._health import disk_writable as disk_writable
from ._health import peer_reachable as peer_reachable
from ._process import ProcessExited as ProcessExited
from ._retry import DEFAULT_RETRY_POLICY as DEFAULT_RETRY_POLICY
from ._retry import NEVER_RETRIED as NEVER_RETRIED
from ._retry import POISON as POISON
from ._retry import RetryPolicy as RetryPolicy
from ._retry import failure_mark as failure_mark
from ._retry import optional as optional
from ._retry import poisonous as poisonous
from ._retry import retry as retry
from ._specs import ActorSpec as ActorSpec
from ._specs import ProcessSpec as ProcessSpec
from ._specs import SupervisorSpec as SupervisorSpec
from ._specs import import_target as import_target
from ._specs import importing_for_node as importing_for_node
from ._supervisor import Supervisor as Supervisor
from ._tree import SupervisorActor as SupervisorActor
