"""Nodes (AMQP 1.0 containers on trio), peer links, addresses."""

from ._certs import init_certs as init_certs
from ._certs import issue_cert as issue_cert
from ._config import ClusterConfig as ClusterConfig
from ._config import NodeConfig as NodeConfig
from ._config import load_cluster as load_cluster
from ._controller import CONTROLLER as CONTROLLER
from ._controller import Controller as Controller
from ._controller import run_cluster as run_cluster
from ._engine import Engine as Engine
from ._engine import EngineHandler as EngineHandler
from ._foreman import CLI_NAME as CLI_NAME
from ._foreman import Foreman as Foreman
from ._foreman import NodeDied as NodeDied
from ._foreman import NodeState as NodeState
from ._foreman import ensure_dev_secrets as ensure_dev_secrets
from ._hosting import ActorsFactory as ActorsFactory
from ._hosting import hosted_actors as hosted_actors
from ._inbound import REPLY_PREFIX as REPLY_PREFIX
from ._node import Node as Node
from ._node import open_node as open_node
from ._preflight import check_references as check_references
from ._preflight import taken_ports as taken_ports
from ._router import Router as Router
from ._store import Store as Store
from ._tls import TlsFiles as TlsFiles
