"""Run the Kubernetes API double by hand: `python -m tests.k8s_double --port 8201 --nodes 4`.

Point a Kubernetes cluster at it with connection {"host": URL, "token": TOKEN,
"verify_ssl": false}; it serves until interrupted.
"""

import argparse
import sys
import time

from tests.k8s_double.server import KubeDouble


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default="double-token")
    parser.add_argument("--nodes", type=int, default=4, help="GPU nodes to register")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    parser.add_argument("--label", default="allot.io/flavor=a100-80g",
                        help="the label the nodes carry (the flavor's node selector)")
    args = parser.parse_args()
    key, _, value = args.label.partition("=")
    double = KubeDouble(port=args.port, token=args.token)
    for i in range(args.nodes):
        double.state.add_node(f"node-{i}", labels={key: value}, gpus=args.gpus)
    double.start()
    sys.stdout.write(f"Kubernetes API double on {double.url} (token {args.token})\n")
    sys.stdout.flush()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        double.stop()


if __name__ == "__main__":
    main()
