"""The operations tier: the Controller, Foremen, the host runner, the reloader, preflight checks,
certificates, the web page.
"""

from ._attend import run_controller as run_controller
from ._build import build_node as build_node
from ._build import node_actors as node_actors
from ._bundle import write_host_bundle as write_host_bundle
from ._certs import init_certs as init_certs
from ._certs import issue_cert as issue_cert
from ._controller import CONTROLLER as CONTROLLER
from ._controller import Controller as Controller
from ._controller import run_cluster as run_cluster
from ._foreman import CLI_NAME as CLI_NAME
from ._foreman import Foreman as Foreman
from ._foreman import NodeDied as NodeDied
from ._foreman import NodeState as NodeState
from ._foreman import ensure_dev_secrets as ensure_dev_secrets
from ._host_runner import ask_down as ask_down
from ._host_runner import ask_stop_node as ask_stop_node
from ._host_runner import check_etcd as check_etcd
from ._host_runner import host_nodes as host_nodes
from ._host_runner import run_host as run_host
from ._node_view import answer_within as answer_within
from ._node_view import hosts_broadcast as hosts_broadcast
from ._node_view import hosts_letters as hosts_letters
from ._node_view import hosts_tree as hosts_tree
from ._preflight import check_references as check_references
from ._preflight import taken_ports as taken_ports
from ._reload_request import Answers as Answers
from ._reload_request import BadRequest as BadRequest
from ._reload_request import HostOutcome as HostOutcome
from ._reload_request import Outcome as Outcome
from ._reload_request import ReloadRequest as ReloadRequest
from ._reload_request import ask_reload as ask_reload
from ._reload_request import outcome_key as outcome_key
from ._reload_request import receipt_key as receipt_key
from ._reload_request import request_key as request_key
from ._reload_request import sign_request as sign_request
from ._reloader import DRAIN_TIMEOUT as DRAIN_TIMEOUT
from ._tracelog import Line as Line
from ._tracelog import read_logs as read_logs
from ._tracelog import trace_ids as trace_ids
