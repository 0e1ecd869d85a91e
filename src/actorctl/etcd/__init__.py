"""etcd: the client, watches, the directory of registered nodes, membership and role leases."""

from ._etcd import EtcdClient as EtcdClient
from ._etcd_wire import EtcdError as EtcdError
from ._etcd_wire import EtcdUnavailable as EtcdUnavailable
from ._membership import MembershipRefused as MembershipRefused
from ._node_record import nodes_prefix as nodes_prefix
from ._role_lease import EtcdRoleLease as EtcdRoleLease
from ._role_lease import follow_holder as follow_holder
