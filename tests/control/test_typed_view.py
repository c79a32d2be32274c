"""Below the kopf registrations, the server's loop and the tuning's worker take the typed views
(:class:`~sglang_operator.api.view.ServerView`, ``TuningView``), never the raw body: the signatures say so (mypy strict
checks every call against them), and this test fails when a function of those modules takes a parameter named like a
body, or a ``view`` that is not typed as the view."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from typing import Any

import pytest

from sglang_operator.api.view import ServerView

LOOP = ("handlers", "observer", "gather", "ticks", "apply", "restore", "ledger", "children", "drain", "multinode",
        "failures", "autoscaling", "server_status", "memory", "tuning", "tunings", "tuning_status")
"""The modules of the server's loop (the handler, the tick, the job, the apply path) and of the tuning's worker."""
RAW = {"body", "server_body", "obj", "cr_body"}
"""Parameter names of a raw object."""
ENTRIES = {
    "handlers.reconcile", "handlers.track", "handlers.child_event", "handlers.pod_event", "tunings.tuning_event",
    "observer.Observer.track", "observer.Observer.pod_event", "observer.Observer.tuning_event",  # the watch's record
    "observer.Observer.memory", "memory.TuningRequests.apply",  # the memory of a delivered object, by its key
    "memory.key_of", "memory.Seen.__init__",  # the delivered object kept, read typed (ServerMemory.view)
}
"""Where the kopf registrations hand the delivered object (and only there)."""


def _functions() -> Iterator[tuple[str, Any]]:
    for name in LOOP:
        module = importlib.import_module(f"sglang_operator.control.{name}")
        for attr, value in vars(module).items():
            if inspect.isfunction(value) and value.__module__ == module.__name__:
                yield f"{name}.{attr}", value
            elif inspect.isclass(value) and value.__module__ == module.__name__:
                for method, fn in vars(value).items():
                    if inspect.isfunction(fn):
                        yield f"{name}.{attr}.{method}", fn


def test_the_loops_modules_are_read() -> None:
    names = dict(_functions())
    assert len(names) > 100 and "observer.Observer.observe" in names and "apply.apply_placement" in names


@pytest.mark.parametrize("qualified", sorted(name for name, _ in _functions()))
def test_no_function_below_the_registrations_takes_a_raw_body(qualified: str) -> None:
    fn = dict(_functions())[qualified]
    params = inspect.signature(fn).parameters
    raw = [p for p in params if p in RAW]
    if qualified in ENTRIES:
        return
    assert not raw, f"{qualified} takes a raw object ({', '.join(raw)}): hand it the ServerView"
    if "view" in params:
        assert params["view"].annotation in ("ServerView", ServerView), f"{qualified}: `view` is not a ServerView"


def test_the_observation_entry_refuses_a_raw_dict() -> None:
    """What the signature says, at run time too: a dict handed to the tick's observation fails at once."""
    from sglang_operator.control.observer import Observer

    with pytest.raises(AttributeError):
        import asyncio

        asyncio.run(Observer(1.0).observe({"metadata": {"name": "a"}}, None))  # type: ignore[arg-type]
