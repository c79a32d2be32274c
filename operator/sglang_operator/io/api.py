"""The Kubernetes API the operator calls, as one protocol (:class:`KubeAPI`), and where another implementation is handed
in (:func:`using`): the offline tests' in-memory API (``tests/control/fakekube.py``) and the no-cluster benchmarks.

Every call the control layer makes goes through a function of :mod:`sglang_operator.io.kube` (reads),
:mod:`sglang_operator.io.kube_write` (writes, behind the fence) or :mod:`sglang_operator.io.revisions` (the ledger),
each marked :func:`dispatched`: while an implementation is bound (:func:`using`, per asyncio context: what a test binds
is seen by the tasks it starts, never by another test's), the call goes to its method of that name; else the function
runs against the cluster. No module attribute is replaced (nothing is monkeypatched), and mypy checks the implementation
against :class:`KubeAPI`.

The writes are marked ``dispatched(name, fence=...)``: the wrapper asks the fence
(:data:`sglang_operator.io.fence.FENCE`) before either runs, so a write refused to a process that does not lead is
refused to the bound implementation too (the offline tests' fake passes the fence as the cluster's calls do). The
process-wide client the cluster's functions use is private to them (:mod:`sglang_operator.io._client`, the
import-linter contract ``client``).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, ParamSpec, Protocol, TypeVar, cast

from sglang_operator.io.fence import FENCE, NotLeader

Obj = dict[str, Any]
P = ParamSpec("P")
R = TypeVar("R")


class KubeAPI(Protocol):
    """What the operator asks of the Kubernetes API: the reads of :mod:`~sglang_operator.io.kube`, the writes of
    :mod:`~sglang_operator.io.kube_write`, the ledger of :mod:`~sglang_operator.io.revisions` and the PodMonitor
    discovery (:data:`sglang_operator.io.discovery.POD_MONITORS`), with the same names, arguments and answers."""

    async def get_object(self, kind: str, namespace: str, name: str) -> Obj | None: ...
    async def get_sglangserver(self, namespace: str, name: str) -> Obj | None: ...
    async def get_sglangtuning(self, namespace: str, name: str) -> Obj | None: ...
    async def list_pods(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]: ...
    async def secret_value(self, namespace: str, name: str, key: str) -> str | None: ...
    async def crd_served(self, name: str, version: str) -> bool: ...
    async def sglangserver_keys(self, namespaces: Sequence[str]) -> dict[tuple[str, str], str]: ...
    async def sglangtunings(self, namespaces: Sequence[str]) -> list[Obj]: ...
    async def apply(self, manifest: Mapping[str, Any], dry_run: bool = False) -> None: ...
    async def patch_replicas(self, kind: str, namespace: str, name: str, replicas: int) -> None: ...
    async def delete_object(self, kind: str, namespace: str, name: str, uid: str | None = None) -> bool: ...
    async def patch_status(self, namespace: str, name: str, resource_version: str | None,
                           status: Mapping[str, Any]) -> Obj | None: ...
    async def patch_tuning_status(self, namespace: str, name: str, resource_version: str | None,
                                  status: Mapping[str, Any]) -> Obj | None: ...
    async def post_event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None: ...
    async def list_revisions(self, namespace: str, server: str) -> list[Obj]: ...
    async def create_revision(self, manifest: Mapping[str, Any]) -> bool: ...
    async def set_digest(self, namespace: str, name: str, digest_ref: str) -> None: ...
    async def set_number(self, namespace: str, name: str, number: int) -> None: ...
    async def delete_revision(self, namespace: str, name: str, uid: str | None = None) -> None: ...
    async def pod_monitors_wanted(self) -> bool: ...


_BOUND: contextvars.ContextVar[KubeAPI | None] = contextvars.ContextVar("sglang_operator_kube_api", default=None)


def bound() -> KubeAPI | None:
    """The implementation bound in this context (None: the cluster's, the functions themselves)."""
    return _BOUND.get()


def bind(api: KubeAPI | None) -> contextvars.Token[KubeAPI | None]:
    """Send every :func:`dispatched` call made from now on in this context (and in the tasks started from it) to
    ``api`` (None: the cluster again); returns the token :func:`reset` takes."""
    return _BOUND.set(api)


def reset(token: contextvars.Token[KubeAPI | None]) -> None:
    """Undo the :func:`bind` that returned ``token``."""
    _BOUND.reset(token)


@contextlib.contextmanager
def using(api: KubeAPI) -> Iterator[KubeAPI]:
    """Send every :func:`dispatched` call made in this context (and in the tasks started from it) to ``api`` until
    the block ends."""
    token = _BOUND.set(api)
    try:
        yield api
    finally:
        _BOUND.reset(token)


FENCED: dict[str, str] = {}
"""The writes: :class:`KubeAPI`'s method name -> what the fence calls it (``dispatched(name, fence=...)``)."""


def _target(arguments: Mapping[str, Any]) -> str:
    """The object a write's arguments name, for the fence's message: ``Kind namespace/name`` of a ``manifest`` or an
    ``obj`` (an Event's subject), else ``[kind] namespace/name``."""
    obj = arguments.get("manifest") or arguments.get("obj")
    if isinstance(obj, Mapping):
        meta = obj.get("metadata") or {}
        return f"{obj.get('kind')} {meta.get('namespace')}/{meta.get('name')}"
    where = f"{arguments.get('namespace')}/{arguments.get('name')}"
    return f"{arguments['kind']} {where}" if arguments.get("kind") else where


def dispatched(name: str, fence: str | None = None,
               quiet: bool = False) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Mark a function of the io layer as :class:`KubeAPI`'s method ``name``: called, it runs the bound
    implementation's method when one is bound (:func:`using`), else itself. For a method of an object (the
    discovery's: its first parameter is ``self``), that argument is not passed on.

    ``fence`` (a write: what the fence's log calls it, e.g. ``"apply"``): first the fence is asked
    (:meth:`sglang_operator.io.fence.Fence.check`, whichever implementation then runs, the cluster's or a bound
    one); refused, the call raises :class:`~sglang_operator.io.fence.NotLeader` (``quiet``: returns None, for a
    write that is informative only, an Event) and neither runs."""

    def mark(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        signature = inspect.signature(fn)
        method = next(iter(signature.parameters), None) == "self"
        if fence is not None:
            FENCED[name] = fence

        @functools.wraps(fn)
        async def call(*args: P.args, **kwargs: P.kwargs) -> R:
            if fence is not None:
                try:
                    FENCE.check(lambda: f"{fence} {_target(signature.bind(*args, **kwargs).arguments)}")
                except NotLeader:
                    if quiet:
                        return cast(R, None)
                    raise
            api = _BOUND.get()
            if api is None:
                return await fn(*args, **kwargs)
            target: Callable[..., Awaitable[R]] = getattr(api, name)
            return await target(*(args[1:] if method else args), **kwargs)

        return call

    return mark
