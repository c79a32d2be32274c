"""The local Kubernetes control plane for tests and demos (see ``launcher.py``)."""

from e2e.cluster.launcher import Cluster, ClusterError, NodeOptions

__all__ = ["Cluster", "ClusterError", "NodeOptions"]
