"""Actors, handlers, behaviours, ActorRef, ask/tell."""

from ._actor import Actor as Actor
from ._address import Address as Address
from ._cell import ActorCell as ActorCell
from ._handlers import BadArguments as BadArguments
from ._handlers import Behaviour as Behaviour
from ._handlers import converter as converter
from ._handlers import handler as handler
from ._ref import ActorRef as ActorRef
from ._ref import Outbox as Outbox
from ._results import AsyncResult as AsyncResult
from ._results import GroupResult as GroupResult
from ._tasks import Directory as Directory
from ._tasks import Retry as Retry
from ._tasks import Signature as Signature
from ._tasks import Task as Task
from ._tasks import TaskApp as TaskApp
from ._tasks import TaskClient as TaskClient
from ._tasks import TaskContext as TaskContext
from ._tasks import chain as chain
from ._tasks import chord as chord
from ._tasks import group as group
from ._worker import DataSink as DataSink
from ._worker import TaskResult as TaskResult
from ._worker import task_actors as task_actors
