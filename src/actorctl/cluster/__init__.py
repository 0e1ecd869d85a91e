"""Nodes (AMQP 1.0 containers on trio), peer links, addresses."""

from ._certs import init_certs as init_certs
from ._engine import Engine as Engine
from ._engine import EngineHandler as EngineHandler
from ._node import Node as Node
from ._node import open_node as open_node
from ._tls import TlsFiles as TlsFiles
