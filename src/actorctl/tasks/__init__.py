"""The task layer: the Celery-like application of the runtime.

Tasks, events, results and the canvas, the worker actor and what follows a
task's run, the scheduler, the beat (periodic tasks), the event hub and the
chord barrier. It uses the runtime's layers (``cluster``, ``supervision``, ``actors``, ``mailbox``);
nothing in the runtime imports it.
"""

from ._cluster_app import TaskClusterApp as TaskClusterApp
from ._cluster_app import cluster_app as cluster_app
from ._hosting import cluster_directory as cluster_directory
from ._hosting import task_actors as task_actors
from .app._app import App as App
from .app._canvas import chord as chord
from .app._canvas import group as group
from .app._registry import TaskRegistry as TaskRegistry
from .app._signature import Signature as Signature
from .app._signature import chain as chain
from .app._task import Retry as Retry
from .app._task import Task as Task
from .app._task import TaskContext as TaskContext
from .client._calls import call as call
from .client._client import Directory as Directory
from .client._client import TaskClient as TaskClient
from .client._client import using_client as using_client
from .client._group_result import GroupResult as GroupResult
from .client._result_registry import ResultRegistry as ResultRegistry
from .client._results import AsyncResult as AsyncResult
from .limits._budget import Concurrency as Concurrency
from .limits._limits import check_soft_time_limit as check_soft_time_limit
from .limits._limits import soft_time_limit as soft_time_limit
from .limits._pacing import PoolRouter as PoolRouter
from .limits._rates import RateLimit as RateLimit
from .limits._rates import rate_limit_of as rate_limit_of
from .services._beat import Beat as Beat
from .services._chords import ChordBarrier as ChordBarrier
from .services._crontab import crontab as crontab
from .services._events import EventHub as EventHub
from .services._periodic import PeriodicTask as PeriodicTask
from .services._periodic import Schedule as Schedule
from .services._scheduler import Scheduler as Scheduler
from .sources._source import Source as Source
from .sources._source import SourceActor as SourceActor
from .sources._source import SourceError as SourceError
from .sources._source import SourceSpec as SourceSpec
from .sources._source_kinds import DirectorySource as DirectorySource
from .sources._source_kinds import HttpSource as HttpSource
from .sources._source_kinds import SqliteSource as SqliteSource
from .worker._control import Control as Control
from .worker._control import TaskControl as TaskControl
from .worker._control import WorkerState as WorkerState
from .worker._documents import DataSink as DataSink
from .worker._documents import TaskResult as TaskResult
from .worker._worker import TaskWorker as TaskWorker
