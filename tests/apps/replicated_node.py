"""One node of a cluster file, built as ``host up`` builds it (insecure), run
until it is killed: ``python -m tests.apps.replicated_node CLUSTER.toml NAME``.
Prints ``ready`` once it listens. For tests/hosts/test_replicated_services.py,
which SIGKILLs it."""

from __future__ import annotations

import sys
from pathlib import Path

import trio

from actorctl import open_node
from actorctl.cluster import NodeStorage, hosted_actors, load_cluster


async def main(path: str, name: str) -> None:
    config = load_cluster(Path(path))
    node = next(n for n in config.nodes if n.name == name)
    actors = hosted_actors(node.actors, node=node, cluster=config)
    storage = NodeStorage(store=config.store(node))
    async with open_node(name, actors, port=node.port, insecure=True, storage=storage):
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
