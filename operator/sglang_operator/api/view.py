"""The typed view of one object, built once per resourceVersion and handed down: what every function below the kopf
registrations reads instead of the raw body (docs/architecture.md, "The typed view").

- :class:`ObjectRef`: who an object is (apiVersion, kind, namespace, name, uid): the owner of children, the object
  of an Event, the target of a write;
- :class:`ServerView`: one SGLangServer as the watch (or a write's answer) delivered it: its reference, generation,
  resourceVersion, annotations, the spec and status as stored (read-only mappings: the ledger hashes the spec, a
  status patch is diffed against the stored status) and the status parsed (:class:`SGLangServerStatus`), with the
  object parsed on first use (:attr:`ServerView.server`);
- :class:`TuningView`: one SGLangTuning as read (each step of its worker reads it once): reference, generation,
  resourceVersion, its status parsed, the object parsed on first use (:attr:`TuningView.tuning`).

A view is frozen: what changes (a status patch's answer, what a job applied) is a new view.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from sglang_operator.api.server import SGLangServer, SpecError, parse, parse_spec, parse_status
from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.api.tuning import SGLangTuning, parse_tuning, parse_tuning_status
from sglang_operator.api.tuning_status import SGLangTuningStatus

log = logging.getLogger("sglang_operator.api")
_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _status_of(body: Mapping[str, Any]) -> SGLangServerStatus:
    """``body``'s status typed: a ``tuningHold`` edited by hand that does not parse holds nothing (the rest is read as
    stored); any other status that does not parse reads as empty (:func:`~sglang_operator.api.server.parse_status`,
    logged)."""
    stored = body.get("status") or {}
    try:
        return SGLangServerStatus.model_validate(dict(stored))
    except ValidationError:
        if "tuningHold" in stored:
            log.warning("status.tuningHold of %s does not parse; read as no hold",
                        (body.get("metadata") or {}).get("name"))
            return parse_status({**body, "status": {k: v for k, v in stored.items() if k != "tuningHold"}})
        return parse_status(body)


def _identity(body: Mapping[str, Any], kind: str) -> tuple[ObjectRef, int, str, bool]:
    """(reference, generation, resourceVersion, being deleted) of custom resource ``body`` of ``kind`` (a body
    without ``apiVersion`` or ``kind``, as some tests build them, is taken for this group's)."""
    meta = body.get("metadata") or {}
    ref = ObjectRef.of({"apiVersion": body.get("apiVersion") or "sglang-operator.io/v1alpha1",
                        "kind": body.get("kind") or kind, "metadata": meta})
    return ref, int(meta.get("generation") or 0), str(meta.get("resourceVersion") or ""), \
        bool(meta.get("deletionTimestamp"))


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """A Kubernetes object's identity: ``api_version`` (``group/version``), ``kind``, ``namespace`` (``default`` when
    the object names none), ``name`` and ``uid`` (empty when unknown: a manifest not created yet)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectRef:
        """The reference of Kubernetes object ``obj`` (API JSON; the API server always sends a name and a uid, an
        object built offline may lack them: empty then)."""
        meta = obj.get("metadata") or {}
        return cls(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""),
                   str(meta.get("namespace") or "default"), str(meta.get("name") or ""), str(meta.get("uid") or ""))

    def stub(self) -> dict[str, Any]:
        """The object as the few fields an owner reference or an Event's ``involvedObject`` reads:
        ``{apiVersion, kind, metadata: {namespace, name, uid}}`` (a new dict each call)."""
        return {"apiVersion": self.api_version, "kind": self.kind,
                "metadata": {"namespace": self.namespace, "name": self.name, "uid": self.uid}}


class _Referenced:
    """The identity of a view, read from its :class:`ObjectRef`."""

    ref: ObjectRef

    @property
    def namespace(self) -> str:
        return self.ref.namespace

    @property
    def name(self) -> str:
        return self.ref.name

    @property
    def uid(self) -> str:
        return self.ref.uid


@dataclass(frozen=True, eq=False)
class ServerView(_Referenced):
    """One SGLangServer as stored at :attr:`resource_version`: see the module docstring. Build it with :meth:`of`."""

    ref: ObjectRef
    generation: int
    resource_version: str
    deleting: bool
    annotations: Mapping[str, str]
    spec_data: Mapping[str, Any]
    """The spec as stored (camelCase; read-only): what the ledger records and hashes, what a trial derives from."""
    status_data: Mapping[str, Any]
    """The status as stored (read-only): only a status patch's diff reads it (:func:`sglang_operator.decisions.status.
    merge_patch`); every other reader takes :attr:`status`."""
    status: SGLangServerStatus
    """The status parsed: the stored one, with what the server's job applied and has not written yet merged in
    (:meth:`with_status`)."""
    applied: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """The status keys the server's job applied and the next status patch writes (:meth:`with_status`; empty: none)."""

    @classmethod
    def of(cls, body: Mapping[str, Any], status: SGLangServerStatus | None = None) -> ServerView:
        """The view of SGLangServer ``body`` (API JSON); ``status``: its status parsed already (else parsed here,
        :func:`~sglang_operator.api.server.parse_status`; a ``tuningHold`` that does not parse holds nothing)."""
        meta = body.get("metadata") or {}
        stored = body.get("status") or {}
        return cls(
            *_identity(body, "SGLangServer"),
            MappingProxyType({str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}),
            MappingProxyType(dict(body.get("spec") or {})),
            MappingProxyType(dict(stored)) if stored else _EMPTY,
            status if status is not None else _status_of(body),
        )

    @property
    def key(self) -> tuple[str, str]:
        """``(namespace, name)``: the server's key in the operator's memory."""
        return self.ref.namespace, self.ref.name

    def body(self, spec: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The object without its status, as :func:`~sglang_operator.api.server.parse` reads it, with ``spec``
        instead of the stored one when given (a ledger entry's, a trial's). A new dict each call."""
        return {"apiVersion": self.ref.api_version, "kind": self.ref.kind,
                "metadata": {"namespace": self.namespace, "name": self.name, "uid": self.uid,
                             "generation": self.generation, "annotations": dict(self.annotations)},
                "spec": dict(self.spec_data if spec is None else spec)}

    @cached_property
    def server(self) -> SGLangServer:
        """The object parsed without its status, once per view. Raises
        :class:`~sglang_operator.api.server.SpecError` (each access: a failed parse is not cached)."""
        return parse(self.body())

    def parse_with(self, spec: Mapping[str, Any]) -> SGLangServer:
        """The object parsed with ``spec`` instead of its own (a ledger entry's, a trial's). Raises
        :class:`~sglang_operator.api.server.SpecError`."""
        return parse(self.body(spec))

    def applied_spec(self) -> SGLangServerSpec:
        """The spec last applied (the ledger record of ``status.revision``), else the object's spec; parsed.

        After a refused update the object's spec is not what runs: replicas, port and requested settings come from
        what was applied. Raises :class:`~sglang_operator.api.server.SpecError` when neither parses."""
        record = self.status.applied_record
        if record is not None and record.spec:
            try:
                return parse_spec(record.spec)
            except SpecError:
                pass
        return parse_spec(self.spec_data)

    def with_status(self, applied: Mapping[str, Any]) -> ServerView:
        """This view with :attr:`status` parsed from the stored status and the keys ``applied`` (what the server's job
        applied, not written yet: :attr:`applied`) merged over it; :attr:`status_data` stays the stored one (a patch
        is diffed against it). Rare: once after a job's apply. ``applied`` empty: this view."""
        if not applied:
            return self
        return ServerView(self.ref, self.generation, self.resource_version, self.deleting, self.annotations,
                          self.spec_data, self.status_data, _status_of({"metadata": {"name": self.name},
                                                                 "status": {**self.status_data, **applied}}),
                          MappingProxyType(dict(applied)))


@dataclass(frozen=True, eq=False)
class TuningView(_Referenced):
    """One SGLangTuning as stored at :attr:`resource_version`. Build it with :meth:`of`."""

    ref: ObjectRef
    generation: int
    resource_version: str
    deleting: bool
    mode: str
    """``spec.mode`` as stored (``Shadow`` or ``InPlace``; empty when absent): read even when the spec does not
    parse (a finished tuning's cleanup)."""
    status: SGLangTuningStatus
    _body: Mapping[str, Any]

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> TuningView:
        """The view of SGLangTuning ``body`` (API JSON), its status parsed
        (:func:`~sglang_operator.api.tuning.parse_tuning_status`)."""
        return cls(
            *_identity(body, "SGLangTuning"), str((body.get("spec") or {}).get("mode") or ""),
            parse_tuning_status(body), MappingProxyType(dict(body)))

    @cached_property
    def tuning(self) -> SGLangTuning:
        """The object parsed, once per view. Raises :class:`~sglang_operator.api.server.SpecError` (each access: a
        failed parse is not cached)."""
        return parse_tuning(self._body)
