"""What ``undo`` writes into an SGLangServer, and how, so that the user's next ``kubectl apply`` of their own file
replaces it field for field (pure; :func:`sglang_operator.plugin.commands.undo` does the I/O).

``undo`` sets the spec's *revision keys* (everything but ``replicas``, ``rollback`` and ``strategy``: scaling and
policy are the user's; ``--with-policy`` takes ``rollback`` and ``strategy`` from the revision too) to the spec the
revision was recorded with (its ControllerRevision's ``data.spec``). A field written that way must not outlive the
user's next apply of a file that leaves it out, whichever way they apply:

- ``kubectl apply`` (client-side) deletes only the fields recorded in the annotation
  ``kubectl.kubernetes.io/last-applied-configuration`` (a three-way JSON merge patch: last applied, the file, the
  object). When the object carries it, :func:`plan` rewrites it in the same write: the user's last applied
  configuration with the revision keys of the spec as ``undo`` set them (default values left out, as a file that
  never wrote them), and that write goes out under kubectl's own field manager ``kubectl-client-side-apply``.
- ``kubectl apply --server-side`` removes the fields its field manager (``kubectl`` by default) owned and the file
  no longer has, unless another manager owns them too. When that manager has an ``Apply`` entry in
  ``metadata.managedFields``, :func:`owned` makes it the one owner of the revision keys as ``undo`` set them
  (every other entry loses them), written second, changing no value (so no new generation). The API server keeps
  the annotation of an object applied both ways up to date itself on a server-side apply by ``kubectl``
  (k8s.io/apimachinery ``managedfields/internal/lastappliedupdater.go``).

Ownership sets are written as the API server writes an ``Apply`` entry's ``fieldsV1`` for this CRD: ``f:<key>`` per
field, leaves ``{}``, maps by their fields (no ``.``), lists atomic (the CRD declares no ``x-kubernetes-list-type``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
"""The annotation client-side ``kubectl apply`` keeps the applied file in (JSON)."""
CLIENT_SIDE_MANAGER = "kubectl-client-side-apply"
"""The field manager of client-side ``kubectl apply``'s writes."""
SERVER_SIDE_MANAGER = "kubectl"
"""The default field manager of ``kubectl apply --server-side``."""
UNDO_MANAGER = "kubectl-sglang"
"""The field manager of ``undo``'s write when no ``kubectl apply`` of either kind manages the object."""
POLICY_KEYS = ("rollback", "strategy")
"""Spec keys ``undo`` leaves as they are unless asked (``--with-policy``): how revisions are judged and rolled out."""
SCALE_KEYS = ("replicas", "autoscaling")
"""Spec keys ``undo`` never takes from the revision: scaling is the user's (a rollback keeps it too), and an InPlace
tuning trial's revision runs without ``autoscaling`` (decisions.tuning.trialspec)."""


@dataclass(frozen=True)
class Plan:
    """``undo``'s first write: ``patch`` (a JSON patch, RFC 6902, with the read ``resourceVersion`` as precondition:
    409 when the object changed since; empty when the spec is the revision's already) under ``field_manager``.

    ``spec``: the object's spec after it; ``revision_keys``: the spec keys taken from the revision; ``kept``: the
    spec keys kept as the object had them; ``last_applied``: the new client-side apply annotation (None: the object
    has none); ``applier``: the server-side apply field manager :func:`owned` credits next (None: no such entry)."""

    spec: dict[str, Any]
    patch: list[dict[str, Any]]
    field_manager: str
    revision_keys: tuple[str, ...]
    kept: tuple[str, ...]
    last_applied: dict[str, Any] | None
    applier: str | None


def _pointer(*parts: str) -> str:
    """A JSON pointer (RFC 6901) to ``parts``."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def applies(body: Mapping[str, Any], manager: str) -> bool:
    """Whether ``manager`` has an ``Apply`` entry (server-side apply) for the object's main resource."""
    return any(e.get("manager") == manager and e.get("operation") == "Apply" and not e.get("subresource")
               for e in (body.get("metadata") or {}).get("managedFields") or [])


def prune_defaults(value: Any, schema: Mapping[str, Any]) -> Any:
    """``value`` without the fields that equal their ``default`` in the structural OpenAPI ``schema`` (the CRD's),
    recursively: what a file that never wrote them holds. A map whose fields all went keeps ``{}`` unless it has a
    default itself (a block such as ``rollback``); lists and free-form maps are compared whole."""
    props = schema.get("properties")
    if not isinstance(value, Mapping) or not isinstance(props, Mapping):
        return copy.deepcopy(value)
    out: dict[str, Any] = {}
    for key, item in value.items():
        node = props.get(key)
        if not isinstance(node, Mapping):
            out[key] = copy.deepcopy(item)
            continue
        pruned = prune_defaults(item, node)
        if "default" in node and pruned == prune_defaults(node["default"], node):
            continue
        out[key] = pruned
    return out


def plan(body: Mapping[str, Any], revision_spec: Mapping[str, Any], schema: Mapping[str, Any], *,
         with_policy: bool = False, applier: str = SERVER_SIDE_MANAGER) -> Plan:
    """The first write of ``undo`` for SGLangServer ``body`` (as read, ``metadata.managedFields`` included) to the
    revision recorded with ``revision_spec``. ``schema``: the CRD's structural schema of ``spec`` (its defaults);
    ``with_policy``: take ``rollback`` and ``strategy`` from the revision too; ``applier``: the server-side apply field
    manager to credit when it has an Apply entry."""
    live = dict(body.get("spec") or {})
    keep = set(SCALE_KEYS) | (set() if with_policy else set(POLICY_KEYS))
    revision_keys = tuple(sorted((live.keys() | revision_spec.keys()) - keep))
    spec = {k: copy.deepcopy(v) for k, v in live.items() if k in keep}
    spec |= {k: copy.deepcopy(revision_spec[k]) for k in revision_keys if k in revision_spec}
    meta = body.get("metadata") or {}
    patch: list[dict[str, Any]] = []
    for key in revision_keys:
        if key not in spec:
            patch.append({"op": "remove", "path": _pointer("spec", key)})
        elif live.get(key) != spec[key]:
            patch.append({"op": "add", "path": _pointer("spec", key), "value": spec[key]})
    last = _last_applied(meta)
    new_last: dict[str, Any] | None = None
    if last is not None:
        user_spec: Mapping[str, Any] = last["spec"] if isinstance(last.get("spec"), Mapping) else {}
        applied = applied_spec(spec, revision_keys, schema)
        new_last = {**last, "spec": {**{k: v for k, v in user_spec.items() if k not in revision_keys}, **applied}}
        if patch or new_last != last:
            patch.append({"op": "add", "path": _pointer("metadata", "annotations", LAST_APPLIED),
                          "value": json.dumps(new_last, separators=(",", ":"), sort_keys=True)})
    if patch:
        patch.insert(0, {"op": "replace", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")})
    credited = applier if applies(body, applier) else None
    manager = CLIENT_SIDE_MANAGER if last is not None and credited is None else UNDO_MANAGER
    return Plan(spec, patch, manager, revision_keys, tuple(sorted(k for k in keep if k in live)), new_last, credited)


def _last_applied(meta: Mapping[str, Any]) -> dict[str, Any] | None:
    raw = (meta.get("annotations") or {}).get(LAST_APPLIED)
    if not raw:
        return None
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def applied_spec(spec: Mapping[str, Any], revision_keys: Sequence[str], schema: Mapping[str, Any]) -> dict[str, Any]:
    """The revision keys of ``spec`` as a file would write them: default values left out (``schema``: the CRD's
    spec schema)."""
    pruned = prune_defaults({k: spec[k] for k in revision_keys if k in spec}, schema)
    return dict(pruned) if isinstance(pruned, Mapping) else {}


def fieldset(value: Any) -> dict[str, Any]:
    """The ``fieldsV1`` the API server records for applying ``value``: a map by its fields, anything else a leaf."""
    if isinstance(value, Mapping) and value:
        return {f"f:{k}": fieldset(v) for k, v in value.items()}
    return {}


def owned(body: Mapping[str, Any], applier: str, revision_keys: Sequence[str],
          applied: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """``metadata.managedFields`` of ``body`` with ``applier``'s Apply entry the one owner of the revision keys as
    ``applied`` (:func:`applied_spec`) holds them: every other entry of the main resource loses those keys (an entry
    left owning nothing is dropped; status entries are untouched). None when ``applier`` has no Apply entry, or
    when nothing changes."""
    entries = copy.deepcopy(list((body.get("metadata") or {}).get("managedFields") or []))
    mine = next((e for e in entries if e.get("manager") == applier and e.get("operation") == "Apply"
                 and not e.get("subresource")), None)
    if mine is None:
        return None
    out = []
    for entry in entries:
        if entry.get("subresource"):
            out.append(entry)
            continue
        fields = entry.setdefault("fieldsV1", {})
        spec = fields.get("f:spec")
        if isinstance(spec, dict):
            for key in revision_keys:
                spec.pop(f"f:{key}", None)
        if entry is mine:
            spec = fields.setdefault("f:spec", {})
            spec |= {f"f:{k}": fieldset(v) for k, v in applied.items() if k in revision_keys}
        if isinstance(fields.get("f:spec"), dict) and not fields["f:spec"]:
            del fields["f:spec"]
        if fields or entry is mine:
            out.append(entry)
    before = (body.get("metadata") or {}).get("managedFields") or []
    return None if out == before else out
