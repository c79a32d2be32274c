"""spec.strategy → the Deployment's strategy: Recreate by default, RollingUpdate with maxUnavailable and no
surge (a second copy of the model would need GPUs that may not exist)."""

from __future__ import annotations

from typing import Any

from sglang_operator.api import parse
from sglang_operator.builders import render


def server(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer", "metadata": {"name": "s"},
            "spec": {"sglang": {"image": "lmsysorg/sglang:v0.5.10-cu129"}, "model": {"path": "Qwen/Qwen3.6-27B"},
                     "parallelism": {"tensor": 2}, **spec}}


def test_recreate_is_the_default() -> None:
    dep = render(parse(server())).deployment
    assert dep["spec"]["strategy"] == {"type": "Recreate"}


def test_rolling_update_never_surges() -> None:
    dep = render(parse(server(replicas=4, strategy={"type": "RollingUpdate", "maxUnavailable": "50%"}))).deployment
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate",
                                       "rollingUpdate": {"maxUnavailable": "50%", "maxSurge": 0}}
    default = render(parse(server(replicas=2, strategy={"type": "RollingUpdate"}))).deployment
    assert default["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 1, "maxSurge": 0}


def test_strategy_is_not_part_of_the_revision() -> None:
    """Changing how pods are replaced must not itself replace them."""
    a = render(parse(server(replicas=2)))
    b = render(parse(server(replicas=2, strategy={"type": "RollingUpdate"})))
    c = render(parse(server(replicas=2, strategy={"drainSeconds": 60})))
    assert a.revision == b.revision == c.revision
