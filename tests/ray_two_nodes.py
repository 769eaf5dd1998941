"""A two-node Ray cluster on this machine, for the multi-node tests: ``python tests/ray_two_nodes.py``.

Two raylets (each with its own object store, 2 CPUs and 2 logical GPUs) joined
to one GCS, all bound to 127.0.0.1: Ray's own ``ray.cluster_utils.Cluster``.
(``ray start --address`` refuses a second node while
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, the setting that keeps Ray on loopback.)
Prints one JSON line (the address, the second node's id and its raylet's
pid), then runs until SIGTERM, when it shuts the cluster down.
"""

from __future__ import annotations

import json
import signal
import threading

from ray.cluster_utils import Cluster


def main() -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 2, "include_dashboard": False})
    try:
        second = cluster.add_node(num_cpus=2, num_gpus=2)
        cluster.wait_for_nodes()
        info = {
            "address": cluster.address,
            "head_node_id": cluster.head_node.node_id,
            "second_node_id": second.node_id,
            "second_raylet_pid": second.all_processes["raylet"][0].process.pid,
        }
        print(json.dumps(info), flush=True)
        stop.wait()
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
