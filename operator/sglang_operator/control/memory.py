"""Per-server memory: everything the operator keeps in memory about one SGLangServer, in one object, and the map
of them that the operator context holds (kopf's ``memo``, :mod:`sglang_operator.control.handlers`).

A :class:`ServerMemory` is created the first time a server is seen (a watch event, a reconcile) and dropped when
it is deleted (watch event ``DELETED``) or when a resync no longer finds it (a deletion missed during a watch
gap); nothing else refers to it, so it is collected with the server. Its :attr:`~ServerMemory.lock` is the
server's serialised worker: every write for that server (the reconcile handler's apply and status, an
observation's status patch and events, a rollback's drain and apply, child repair, the late LeaderWorkerSet
apply) runs holding it, so two writers never interleave for one server and servers never wait on each other.
A long write (a drain before a Recreate, up to ``spec.strategy.drainSeconds``) runs as the server's
:attr:`~ServerMemory.job`, outside the observer's tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from sglang_operator.api.view import ServerView
from sglang_operator.decisions.autoscaling import ScalerRecord
from sglang_operator.decisions.sampling.backoff import Backoff
from sglang_operator.decisions.tuning import known_best
from sglang_operator.decisions.tuning.inplace import TuningRequest, request_of
from sglang_operator.decisions.tuning.queue import Candidate
from sglang_operator.io.sampler import SamplerState

if TYPE_CHECKING:
    from sglang_operator.api.server import SGLangServer
    from sglang_operator.api.spec import SGLangServerSpec

Key = tuple[str, str]
"""``(namespace, name)`` of an SGLangServer."""


def key_of(obj: Any) -> Key:
    """``(namespace, name)`` of a Kubernetes object dict (``metadata.namespace`` defaults to ``default``)."""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name"))


@dataclass(frozen=True)
class ParseCache:
    """The object parsed without its status and the spec it last applied, valid while ``stamp`` (uid, generation,
    ``status.revision``) stays."""

    stamp: tuple[str, int, str]
    server: SGLangServer
    applied: SGLangServerSpec
    unchanged: bool = False
    """Whether the object's spec is the one ``status.revision`` was applied from (replicas aside)."""


WRITERS: Mapping[str, str] = MappingProxyType({
    # identity: set when the memory is made (Memories.of adds a uid learnt later)
    "namespace": "control.memory", "name": "control.memory", "uid": "control.memory", "lock": "control.memory",
    # what the watch saw (Seen): the watch, a status patch's answer (Observer.answered), a view refused as stale
    "seen.body": "control.observer", "seen.stale_rv": "control.observer",
    "seen.typed": "control.memory", "seen._typed_from": "control.memory",  # Seen.view's cache
    # what the job applied, and the reconcile handler's hand-off (Observer.superseded, rendered, handled)
    "job": "control.observer", "applied": "control.observer", "handled": "control.observer",
    # the tick's caches
    "parsed": "control.observer", "spec_revision": "control.observer", "diffs": "control.observer",
    "observation": "control.ticks",
    # what a failed apply leaves behind (the handler's and the job's)
    "apply_failure": "control.failures", "apply_failure_reason": "control.failures", "apply_error": "control.failures",
    # what the observer's reads hold (Reads) and the tuning's hold (Hold)
    "reads.sampling": "control.gather", "reads.backoff": "control.gather", "reads.digests": "control.gather",
    "hold.spec_hash": "control.gather",
    "draining": "control.memory",  # ServerMemory.draining_pods, the drain's block (control/drain.py)
    # the autoscaler's last write
    "scaler": "control.autoscaling",
})
"""Each field of :class:`ServerMemory` (``seen.``, ``reads.``, ``hold.`` fields: of its concern :class:`Seen`,
:class:`Reads`, :class:`Hold`) and the one module of
:mod:`sglang_operator` that writes it (assigns it, an item of it or an attribute of it), by concern;
``tests/control/test_memory_writers.py`` reads the package with ``ast`` and fails on a write from any other module
(or a field missing here). Others write through the owner: the reconcile handler through
:meth:`~sglang_operator.control.observer.Observer.answered`, ``superseded``, ``rendered``, ``handled`` and
:func:`~sglang_operator.control.failures.handler_failed`."""


@dataclass(eq=False)
class Seen:
    """What the watch saw of one SGLangServer: written by :mod:`sglang_operator.control.observer` only (the watch's
    :meth:`~sglang_operator.control.observer.Observer.track`, a status patch's answer through
    :meth:`~sglang_operator.control.observer.Observer.answered`, a view found stale).

    - ``body``: the newest object from the watch (or a status patch's answer), as delivered: the server's loop reads
      it typed (:meth:`view`); the tuning queue reads it as is;
    - ``stale_rv``: the resourceVersion of a view whose status patch was refused (409): not observed again until a
      newer view arrives (a resourceVersion once refused never names the newest object again);
    - ``typed``: the newest object typed (:meth:`view`), built once per object delivered (this class's own cache).
    """

    body: dict[str, Any] | None = None
    stale_rv: str | None = None
    typed: ServerView | None = None
    _typed_from: dict[str, Any] | None = field(default=None, repr=False)

    def view(self) -> ServerView | None:
        """The newest object (:attr:`body`) as a :class:`~sglang_operator.api.view.ServerView`: its status parsed
        once per resourceVersion (a re-list delivers the same state again: not parsed again), then handed to every
        function of the tick, the job and the apply path; None before the first sight."""
        if self.body is None:
            return None
        rv = str((self.body.get("metadata") or {}).get("resourceVersion") or "")
        same = self.typed is not None and (self._typed_from is self.body or (rv and self.typed.resource_version == rv))
        if not same:  # a resourceVersion names one state of the object: the same one delivered again is not parsed
            self.typed, self._typed_from = ServerView.of(self.body), self.body
        assert self.typed is not None
        return self.typed


@dataclass(eq=False)
class Reads:
    """What the observer's reads hold of one SGLangServer: written by :mod:`sglang_operator.control.gather` only.

    - ``sampling``: the sampler's state (each pod's previous scrape, the last interval's end, pending probes, the
      parse CPU spent; :class:`~sglang_operator.io.sampler.SamplerState`, changed by the sampler it is handed to);
    - ``backoff``: when its pods are read again after reads that all timed out
      (:mod:`sglang_operator.decisions.sampling.backoff`);
    - ``digests``: revision → image digest recorded on its ControllerRevision (noted once per revision).
    """

    sampling: SamplerState = field(default_factory=SamplerState)
    backoff: Backoff = field(default_factory=Backoff)
    digests: dict[str, str] = field(default_factory=dict)


@dataclass(eq=False)
class Hold:
    """The tuning's hold, as the server's loop keeps it: written by :mod:`sglang_operator.control.gather` only.
    ``spec_hash``: ``(generation, hash)`` of the object's spec without ``replicas``
    (:func:`sglang_operator.decisions.tuning.hold.spec_hash`, computed once per generation: it tells a spec change,
    which ends an InPlace hold, from a scale)."""

    spec_hash: tuple[int, str] | None = None


@dataclass(eq=False)
class ServerMemory:
    """What the operator remembers about one SGLangServer between two events or ticks.

    Split by concern, each field written from one module (:data:`WRITERS`, checked by
    ``tests/control/test_memory_writers.py``):

    - ``seen``: what the watch saw (:class:`Seen`; :attr:`body` and :meth:`view` read it);
    - ``parsed``: the parse cache; ``spec_revision``: ``(generation, revision)`` the spec renders to (None: refused);
    - ``apply_failure``: the last failed apply that was not the spec's fault (reconcile handler), until one
      succeeds: shown as ``Degraded`` reason ``apply_failure_reason`` (``ApplyFailed``; ``ChildConflict`` when
      another owner holds a child's name, the analysis' apply included), one Warning event per distinct failure;
    - ``apply_error``: the last failed apply of the analysis' ``Apply`` (one event per distinct message);
    - ``diffs``: the last SettingsDiffer differences (one event per change);
    - ``draining``: its old pods are being drained (the sampler sends them no probe);
    - ``job``: a long write of this server's worker in progress (a rollback's drain and apply);
    - ``reads``: what the observer's reads hold (:class:`Reads`: the sampler's state, the read back-off, the image
      digests); ``hold``: the tuning's hold (:class:`Hold`: the spec's hash without ``replicas``);
    - ``applied``: the status keys of what that job applied (``revision``, ``command``, the ledger …), written by
      the next observation's one status patch (then emptied); the reconcile handler's own apply clears them.
    """

    namespace: str
    name: str
    uid: str = ""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    seen: Seen = field(default_factory=Seen)
    parsed: ParseCache | None = None
    spec_revision: tuple[int, str | None] | None = None
    apply_failure: str | None = None
    apply_failure_reason: str = "ApplyFailed"
    apply_error: str | None = None
    diffs: list[str] | None = None
    draining: bool = False
    job: asyncio.Task[None] | None = None
    observation: asyncio.Task[None] | None = None
    """The observation of this server under way (it may outlast its tick: a slow pod holds no other server; the
    next tick skips this one until it ends)."""
    applied: dict[str, Any] = field(default_factory=dict)
    handled: tuple[int, str, float] | None = None
    """``(generation, revision, monotonic time)`` the reconcile handler applied and has not seen in a view yet: until
    a view shows that revision (the watch may still bring views from before the handler's status patch), the view is
    older than what runs (an observation would take the handler's apply for a lost update and apply it again)."""
    reads: Reads = field(default_factory=Reads)
    hold: Hold = field(default_factory=Hold)
    scaler: ScalerRecord | None = None
    """The ScaledObject last written or deleted, and how that went (None: not since this process started; the first
    tick compares); written by :mod:`sglang_operator.control.autoscaling` only, after the tick's status patch."""

    @property
    def body(self) -> dict[str, Any] | None:
        """The newest object the watch (or a write's answer) delivered (:attr:`Seen.body`; read-only here)."""
        return self.seen.body

    @property
    def stale_rv(self) -> str | None:
        """:attr:`Seen.stale_rv` (read-only here)."""
        return self.seen.stale_rv

    def view(self) -> ServerView | None:
        """The newest object typed (:meth:`Seen.view`); None before the first sight."""
        return self.seen.view()

    @property
    def key(self) -> Key:
        return self.namespace, self.name

    @property
    def busy(self) -> bool:
        """Whether the server's worker is at work now (writing, or observing since an earlier tick): a new
        observation would wait for it, so it is skipped."""
        return self.lock.locked() or any(t is not None and not t.done() for t in (self.job, self.observation))

    @contextlib.contextmanager
    def draining_pods(self) -> Iterator[None]:
        """Mark the server as draining for the duration of the block."""
        self.draining = True
        try:
            yield
        finally:
            self.draining = False


class Memories:
    """Every :class:`ServerMemory` of the process by ``(namespace, name)``."""

    def __init__(self) -> None:
        self._by_key: dict[Key, ServerMemory] = {}

    def get(self, key: Key) -> ServerMemory | None:
        """The memory of ``key`` if the server was seen."""
        return self._by_key.get(key)

    def of(self, key: Key, uid: str = "") -> ServerMemory:
        """The memory of ``key``, created on first sight; a server deleted and created again under the same name
        (another ``uid``) starts a new one."""
        mem = self._by_key.get(key)
        if mem is None or (uid and mem.uid and mem.uid != uid):
            if mem is not None:
                self.drop(key)
            mem = ServerMemory(key[0], key[1], uid)
            self._by_key[key] = mem
        elif uid and not mem.uid:
            mem.uid = uid
        return mem

    def drop(self, key: Key) -> ServerMemory | None:
        """Forget ``key`` (its job and observation, if any, are cancelled); returns what was dropped."""
        mem = self._by_key.pop(key, None)
        if mem is not None:
            mem.reads.sampling.cancel()
            for task in (mem.job, mem.observation):
                if task is not None and not task.done():
                    task.cancel()
        return mem

    def draining(self, namespace: str, name: str) -> bool:
        """Whether server ``namespace/name`` is being drained (the sampler's question)."""
        mem = self._by_key.get((namespace, name))
        return mem is not None and mem.draining

    def values(self) -> list[ServerMemory]:
        return list(self._by_key.values())

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key


class TuningRequests:
    """What every SGLangTuning asks of the server it names (:class:`~sglang_operator.decisions.tuning.inplace.
    TuningRequest`), from the tuning watch (:func:`sglang_operator.control.tunings.tuning_event`) and refreshed by
    the observer's resync (:meth:`resync`), indexed by the server's key: the server's gather reads it (no GET per
    tick), and a change wakes the server's worker; the tuning queue reads every request from it
    (:meth:`candidates`) and records who may run (:meth:`admit`). Holds one small request per tuning, never the
    tuning's body; and, per namespace, what each finished tuning measured
    (:class:`~sglang_operator.decisions.tuning.known_best.TuningRecord`: its setup and Completed trials' figures,
    at most 102 trials × 6 levels), from which :meth:`known_best` builds the namespace's table once per change."""

    def __init__(self) -> None:
        self._by_server: dict[Key, dict[str, TuningRequest]] = {}
        self._server_of: dict[Key, Key] = {}
        self._admitted: frozenset[Key] = frozenset()
        self._records: dict[str, dict[str, known_best.TuningRecord]] = {}
        self._known: dict[str, known_best.KnownBest] = {}

    def apply(self, event_type: str | None, body: Any) -> Key | None:
        """Record a watch event of an SGLangTuning (``DELETED`` forgets it); returns the key of the server it names
        (to wake), None when it names none."""
        meta = body.get("metadata") or {}
        tuning: Key = (str(meta.get("namespace") or "default"), str(meta.get("name")))
        self._record(tuning, None if event_type == "DELETED" else known_best.record_of(body))
        old = self._server_of.pop(tuning, None)
        if old is not None:
            self._by_server.get(old, {}).pop(tuning[1], None)
            if not self._by_server.get(old):
                self._by_server.pop(old, None)
        ref = ((body.get("spec") or {}).get("serverRef") or {}).get("name")
        if not ref:
            return old
        server: Key = (tuning[0], str(ref))
        if event_type != "DELETED":
            request = request_of(body)
            if request is not None:
                self._by_server.setdefault(server, {})[tuning[1]] = request
                self._server_of[tuning] = server
        return server

    def resync(self, bodies: Iterable[Any]) -> set[Key]:
        """Replace the whole index by the SGLangTunings of a LIST (``bodies``): a tuning deleted while the watch
        was away (no ``DELETED`` event) is forgotten. Returns the keys of the servers whose requests changed (to
        wake)."""
        before = {server: dict(got) for server, got in self._by_server.items()}
        self._by_server, self._server_of = {}, {}
        self._records, self._known = {}, {}  # a deleted tuning's measurements leave the known best too
        for body in bodies:
            self.apply("MODIFIED", body)
        return {server for server in before.keys() | self._by_server.keys()
                if before.get(server) != self._by_server.get(server)}

    def _record(self, tuning: Key, record: known_best.TuningRecord | None) -> None:
        records = self._records.setdefault(tuning[0], {})
        if records.get(tuning[1]) == record:
            return
        if record is None:
            records.pop(tuning[1], None)
        else:
            records[tuning[1]] = record
        self._known.pop(tuning[0], None)
        if not records:
            self._records.pop(tuning[0], None)

    def known_best(self, namespace: str) -> known_best.KnownBest:
        """The known best of ``namespace``'s finished tunings (:func:`~sglang_operator.decisions.tuning.known_best.
        build`), built again only after a tuning of the namespace changed what it contributes."""
        got = self._known.get(namespace)
        if got is None:
            got = known_best.build((self._records.get(namespace) or {}).values())
            self._known[namespace] = got
        return got

    def settings_condition(self, namespace: str, spec: SGLangServerSpec, generation: int, now: dt.datetime,
                           view: ServerView) -> dict[str, Any] | None:
        """Condition ``SpeculativeSettings`` of a server of ``namespace`` running ``spec`` (``view``: its object as
        stored) against the namespace's known best (:func:`~sglang_operator.decisions.tuning.known_best.
        condition`); None: nothing to say."""
        return known_best.condition(self.known_best(namespace), spec, generation, now, view.status.conditions,
                                    view.name)

    def of(self, key: Key) -> tuple[TuningRequest, ...]:
        """The requests of the tunings naming server ``key``, by name, each with ``admitted`` as the tuning queue
        last decided (:meth:`admit`)."""
        got = self._by_server.get(key) or {}
        return tuple(dataclasses.replace(got[name], admitted=(key[0], name) in self._admitted)
                     for name in sorted(got))

    def candidates(self) -> list[Candidate]:
        """Every tuning's request with the server it names (:func:`sglang_operator.decisions.tuning.queue.admit`'s
        input)."""
        return [Candidate(server[0], server[1], request) for server, got in self._by_server.items()
                for request in got.values()]

    def admit(self, run: frozenset[Key]) -> set[Key]:
        """Record ``run``, the ``(namespace, name)`` of the tunings the queue lets run; returns the keys of the
        servers named by a tuning whose admission changed (to wake: the hold goes only to an admitted tuning)."""
        changed = run ^ self._admitted
        self._admitted = run
        return {server for tuning in changed if (server := self._server_of.get(tuning)) is not None}

    def __len__(self) -> int:
        return len(self._server_of)

    def __contains__(self, tuning: object) -> bool:
        return tuning in self._server_of
