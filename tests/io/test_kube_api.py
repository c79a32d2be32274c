"""The Kubernetes API is handed in through one protocol (:class:`sglang_operator.io.api.KubeAPI`): every io function
marked for it calls the bound implementation, and the offline tests' fake implements every method of it."""

from __future__ import annotations

import inspect
from typing import Any

from sglang_operator.io import api, kube, kube_write, revisions
from sglang_operator.io.discovery import POD_MONITORS, PodMonitorMode
from tests.control.fakekube import FakeKube

METHODS = [name for name, value in vars(api.KubeAPI).items() if inspect.iscoroutinefunction(value)]
DISPATCHED = {name: module for module in (kube, kube_write, revisions) for name in METHODS if hasattr(module, name)}


class Recorder:
    """Answers every :class:`KubeAPI` call with its name and arguments."""

    def __getattr__(self, name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            return (name, args, kwargs)

        return call


def test_the_protocol_names_every_call_the_io_layer_dispatches() -> None:
    assert len(METHODS) == 20
    assert set(DISPATCHED) | {"pod_monitors_wanted"} == set(METHODS)


async def test_each_function_calls_the_bound_implementation_with_its_arguments() -> None:
    recorder: Any = Recorder()
    with api.using(recorder):
        for name, module in DISPATCHED.items():
            params = [p for p in inspect.signature(getattr(module, name)).parameters.values()
                      if p.default is inspect.Parameter.empty]
            args = tuple(f"{name}-{p.name}" for p in params)
            assert await getattr(module, name)(*args) == (name, args, {}), name
        mode, POD_MONITORS.mode = POD_MONITORS.mode, PodMonitorMode.AUTO
        try:
            assert await POD_MONITORS.wanted() == ("pod_monitors_wanted", (), {})
        finally:
            POD_MONITORS.mode = mode
    assert api.bound() is None


def test_the_fake_api_implements_every_method_with_the_same_parameters() -> None:
    fake = FakeKube()
    for name in METHODS:
        ours = inspect.signature(getattr(fake, name))
        theirs = inspect.signature(getattr(api.KubeAPI, name))
        assert inspect.iscoroutinefunction(getattr(fake, name)), name
        assert [p.name for p in ours.parameters.values()] == \
            [p.name for p in theirs.parameters.values() if p.name != "self"], name
