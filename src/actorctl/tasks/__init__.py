"""The task layer: the Celery-like application of the runtime.

Tasks, events, results and the canvas, the worker actor and what follows a
task's run, the scheduler, the beat (periodic tasks), the event hub and the
chord barrier. It uses the runtime's layers (``cluster``, ``supervision``, ``actors``, ``mailbox``);
nothing in the runtime imports it.
"""

from ._app import App as App
from ._beat import Beat as Beat
from ._budget import Concurrency as Concurrency
from ._calls import call as call
from ._canvas import chord as chord
from ._canvas import group as group
from ._chords import ChordBarrier as ChordBarrier
from ._client import Directory as Directory
from ._client import TaskClient as TaskClient
from ._client import using_client as using_client
from ._control import Control as Control
from ._control import TaskControl as TaskControl
from ._control import WorkerState as WorkerState
from ._documents import DataSink as DataSink
from ._documents import TaskResult as TaskResult
from ._events import EventHub as EventHub
from ._hosting import cluster_directory as cluster_directory
from ._hosting import task_actors as task_actors
from ._limits import check_soft_time_limit as check_soft_time_limit
from ._limits import soft_time_limit as soft_time_limit
from ._pacing import PoolRouter as PoolRouter
from ._periodic import PeriodicTask as PeriodicTask
from ._periodic import Schedule as Schedule
from ._rates import RateLimit as RateLimit
from ._rates import rate_limit_of as rate_limit_of
from ._registry import TaskRegistry as TaskRegistry
from ._results import AsyncResult as AsyncResult
from ._results import GroupResult as GroupResult
from ._results import ResultRegistry as ResultRegistry
from ._scheduler import Scheduler as Scheduler
from ._signature import Signature as Signature
from ._signature import chain as chain
from ._source import Source as Source
from ._source import SourceActor as SourceActor
from ._source import SourceError as SourceError
from ._source import SourceSpec as SourceSpec
from ._source_kinds import DirectorySource as DirectorySource
from ._source_kinds import HttpSource as HttpSource
from ._source_kinds import SqliteSource as SqliteSource
from ._task import Retry as Retry
from ._task import Task as Task
from ._task import TaskContext as TaskContext
from ._worker import TaskWorker as TaskWorker
