"""How a command reaches a cluster: who it says it is (its certificates and
keys), where etcd is, and asking the Controller or, across hosts, etcd and
each node."""
