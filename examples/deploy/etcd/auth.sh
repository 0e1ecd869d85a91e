#!/bin/sh
# Turn etcd's auth on, once all three members run (etcd/member-*.env); run it
# once, on any host, as docs/deploy.md says ("etcd"): with ETCDCTL_ENDPOINTS,
# ETCDCTL_CACERT, ETCDCTL_CERT and ETCDCTL_KEY set (etcd's CA, and a client
# certificate of it), and ROOT_PASSWORD the password the root user is given.
# The user actorctl may read and write /actorctl/ only; its password is the
# first line of the file the cluster file's [etcd] password_file names.
set -eu
: "${ROOT_PASSWORD:?give the root user a password: ROOT_PASSWORD=...}"
PASSWORD_FILE="${PASSWORD_FILE:-/etc/actorctl/etcd/password}"
etcdctl user add root --new-user-password="$ROOT_PASSWORD"
etcdctl user grant-role root root
etcdctl role add actorctl
etcdctl role grant-permission actorctl --prefix=true readwrite /actorctl/
etcdctl user add actorctl --new-user-password="$(head -n 1 "$PASSWORD_FILE")"
etcdctl user grant-role actorctl actorctl
etcdctl auth enable
