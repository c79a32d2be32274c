"""``history``, ``diff``, ``retry``, ``promote``, ``abort`` and ``undo`` against the cluster in ``$KUBECONFIG``
(lightkube's sync client). Registered on the ``sglang-operator`` command and shipped as the kubectl plugin
``kubectl-sglang`` (``kubectl sglang history NAME``).

- ``retry``: a rejected revision is deployed again only when the annotation ``sglang-operator.io/retry`` changes
  value; this writes the current time into it.
- ``promote``: accept the revision that serves now as the stable one (e.g. a deliberately slower but cheaper
  configuration): writes its hash into the annotation ``sglang-operator.io/promote``; the operator promotes it
  with the median of its samples so far as the baseline.
- ``abort``: remove the canary in progress (annotation ``sglang-operator.io/abort``); its revision is rejected.
- ``undo``: a user's rollback, like ``kubectl rollout undo``: writes the spec of a revision (default: the stable
  one) into the object. A rejected revision is refused (use ``retry``).
- ``tune start|status|plot|apply``: SGLangTunings (:mod:`sglang_operator.plugin.tune`); ``tune apply`` writes a
  recommendation with the same writer as ``undo`` (:mod:`sglang_operator.plugin.specwrite`).
Exit status 1 for a server or revision that does not exist or is refused; 2 for usage errors (typer's).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from sglang_operator.api.base import ABORT_ANNOTATION, GROUP, PROMOTE_ANNOTATION, RETRY_ANNOTATION
from sglang_operator.api.rollback import without_default_prompt
from sglang_operator.api.server import parse_status
from sglang_operator.builders.labels import REVISION_LABEL
from sglang_operator.plugin import specwrite, view
from sglang_operator.plugin import undo as undo_plan

app = typer.Typer(add_completion=False, no_args_is_help=True, help="The revision ledger of an SGLangServer: "
                  "history, diff, retry, promote, abort and undo; tune searches its speculative settings.",
                  pretty_exceptions_enable=False,
                  rich_markup_mode=None)  # click's plain help: no option name cut at 80 columns
Namespace = Annotated[str, typer.Option("--namespace", "-n", help="namespace of the SGLangServer")]
Output = Annotated[str, typer.Option("--output", "-o", help="table or json")]
Name = Annotated[str, typer.Argument(help="name of the SGLangServer")]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def _client() -> Any:
    from lightkube import Client

    try:
        return Client(field_manager="sglang-operator-cli")
    except Exception as exc:  # no kubeconfig, unreadable config: a clear message, no traceback
        raise _fail(f"no cluster to talk to: {exc}") from None


def _server(client: Any, namespace: str, name: str) -> dict[str, Any]:
    from lightkube import ApiError

    from sglang_operator.io.kube import sglangserver_resource

    try:
        obj: dict[str, Any] = client.get(sglangserver_resource(), name, namespace=namespace).to_dict()
    except ApiError as exc:
        raise _fail(f"SGLangServer {namespace}/{name}: {exc.status.message}") from None
    return obj


def _revisions(client: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    from lightkube.resources.apps_v1 import ControllerRevision

    from sglang_operator.builders.revision import ledger_labels

    labels: dict[str, Any] = dict(ledger_labels(name))
    items = [r.to_dict() for r in client.list(ControllerRevision, namespace=namespace, labels=labels)]
    return sorted(items, key=lambda r: int(r.get("revision") or 0))


def _by_hash(revisions: list[dict[str, Any]], rev: str) -> dict[str, Any]:
    matches = [r for r in revisions if r["metadata"]["labels"].get(REVISION_LABEL, "").startswith(rev)]
    if len(matches) != 1:
        known = ", ".join(r["metadata"]["labels"].get(REVISION_LABEL, "?") for r in revisions) or "none"
        raise _fail(f"revision {rev!r} {'is ambiguous' if matches else 'is not in the ledger'}; known: {known}")
    return matches[0]


def _spec_revision(body: dict[str, Any]) -> str | None:
    """The revision the object's spec renders to (None when it does not render): what the user asked for,
    which may be a rejected revision while the stable one runs."""
    from sglang_operator import builders
    from sglang_operator.api.server import SpecError, parse

    try:
        return builders.render(parse({**body, "status": None})).revision
    except (SpecError, builders.InvalidSpec):
        return None


def _operators(client: Any) -> list[dict[str, Any]] | None:
    """The operator Deployments of every namespace (label :data:`~sglang_operator.plugin.view.OPERATOR_APP_LABEL`),
    None when they cannot be listed (no permission)."""
    from lightkube import ALL_NS, ApiError
    from lightkube.resources.apps_v1 import Deployment

    key, value = view.OPERATOR_APP_LABEL
    try:
        return [d.to_dict() for d in client.list(Deployment, namespace=ALL_NS, labels={key: value})]
    except (ApiError, OSError):
        return None


def _hint_without_status(client: Any, namespace: str, name: str, body: dict[str, Any]) -> None:
    """On stderr, why a server without any status has none (:func:`~sglang_operator.plugin.view.no_status_hint`):
    no operator watches its namespace, or which one does."""
    if body.get("status"):
        return
    for line in view.no_status_hint(namespace, name, _operators(client)):
        typer.echo(line, err=True)


def _width() -> int:
    """Columns of the terminal (``$COLUMNS``, else stdout's terminal), 200 when output goes to no terminal."""
    return shutil.get_terminal_size((200, 24)).columns


@app.command()
def history(name: Name, namespace: Namespace = "default", output: Output = "table") -> None:
    """List every revision in the ledger with its verdict and measured figures (stable one marked ★, the one
    serving marked ▶)."""
    client = _client()
    body = _server(client, namespace, name)
    _hint_without_status(client, namespace, name, body)
    rows = view.history_rows(parse_status(body), _revisions(client, namespace, name), dt.datetime.now(dt.UTC))
    if output == "json":
        typer.echo(json.dumps([r.as_json() for r in rows], indent=2))
        return
    typer.echo(f"SGLangServer {namespace}/{name}")
    for line in view.history_table(rows, _width()):
        typer.echo(line)
    for r in rows:
        if r.reason:
            typer.echo(r.reason if r.reason.startswith(r.revision) else f"{r.revision}: {r.reason}")
    for line in view.canary_lines(parse_status(body)):
        typer.echo(line)
    shown = view.baseline_line(parse_status(body))
    if shown:
        typer.echo(shown)


@app.command()
def diff(
    name: Name,
    rev_a: Annotated[str | None, typer.Argument(help="revision hash (default: the revision the spec renders)")] = None,
    rev_b: Annotated[str | None, typer.Argument(help="revision hash (default: the stable revision)")] = None,
    namespace: Namespace = "default", output: Output = "table",
) -> None:
    """Show the SGLang flags (and environment) two revisions differ in, side by side."""
    client = _client()
    body = _server(client, namespace, name)
    _hint_without_status(client, namespace, name, body)
    status = parse_status(body)
    revisions = _revisions(client, namespace, name)
    rev_a = rev_a or _spec_revision(body) or status.revision
    rev_b = rev_b or status.stable_revision
    if not rev_a or not rev_b:
        raise _fail("name two revisions: this server has no stable revision yet")
    a, b = _by_hash(revisions, rev_a), _by_hash(revisions, rev_b)
    ha, hb = (r["metadata"]["labels"][REVISION_LABEL] for r in (a, b))
    rows = view.flag_diff(a["data"]["command"], b["data"]["command"])
    if output == "json":
        typer.echo(json.dumps({"a": ha, "b": hb, "flags": [{"flag": f, "a": x, "b": y} for f, x, y in rows]},
                              indent=2))
        return
    table = Table(title=f"{name}: {ha} vs {hb}", title_justify="left")
    for col in ("FLAG", ha, hb):
        table.add_column(col, no_wrap=True)
    for row in rows:
        table.add_row(*row)
    Console(width=_width()).print(table)
    if not rows:
        typer.echo("the two revisions run the same SGLang flags")


def _annotate(client: Any, namespace: str, name: str, key: str, value: str) -> None:
    from lightkube.types import PatchType

    from sglang_operator.io.kube import sglangserver_resource

    client.patch(sglangserver_resource(), name, {"metadata": {"annotations": {key: value}}}, namespace=namespace,
                 patch_type=PatchType.MERGE)


@app.command()
def retry(name: Name, namespace: Namespace = "default") -> None:
    """Deploy the spec's revision again although it was rejected (or leave Paused): changes the annotation
    sglang-operator.io/retry, which is what the operator acts on. Exactly one new attempt is made."""
    client = _client()
    body = _server(client, namespace, name)
    token = view.now_rfc3339(dt.datetime.now(dt.UTC))
    if (body["metadata"].get("annotations") or {}).get(RETRY_ANNOTATION) == token:
        token += "-1"
    _annotate(client, namespace, name, RETRY_ANNOTATION, token)
    typer.echo(f"sglangserver.{GROUP}/{name} retry requested ({RETRY_ANNOTATION}={token})")


@app.command()
def promote(name: Name, namespace: Namespace = "default") -> None:
    """Accept the revision that serves now as the stable revision (its samples so far become the baseline); during a
    canary, promote the canary revision: its remaining steps are skipped."""
    client = _client()
    body = _server(client, namespace, name)
    status = parse_status(body)
    if status.canary is not None and status.canary.phase.value != "Removing":
        _annotate(client, namespace, name, PROMOTE_ANNOTATION, status.canary.revision)
        typer.echo(f"sglangserver.{GROUP}/{name} canary revision {status.canary.revision}: promotion requested (the "
                   f"remaining analysis is skipped; it takes every replica one pod at a time)")
        return
    serving = status.revision
    if not serving:
        _hint_without_status(client, namespace, name, body)
        raise _fail(f"{name} serves no revision yet")
    _annotate(client, namespace, name, PROMOTE_ANNOTATION, serving)
    typer.echo(f"sglangserver.{GROUP}/{name} promotion of revision {serving} requested")
    warning = view.promote_warning(status, _min_samples(body))
    if warning:
        typer.echo(f"warning: {warning}", err=True)


@app.command()
def abort(name: Name, namespace: Namespace = "default") -> None:
    """Remove the canary in progress: changes the annotation sglang-operator.io/abort; the operator deletes the
    canary's pods, scales the stable revision back to spec.replicas and rejects the canary's revision (retry allows
    it again)."""
    client = _client()
    body = _server(client, namespace, name)
    status = parse_status(body)
    if status.canary is None:
        raise _fail(f"{name} runs no canary")
    token = view.now_rfc3339(dt.datetime.now(dt.UTC))
    if (body["metadata"].get("annotations") or {}).get(ABORT_ANNOTATION) == token:
        token += "-1"
    _annotate(client, namespace, name, ABORT_ANNOTATION, token)
    typer.echo(f"sglangserver.{GROUP}/{name} canary {status.canary.revision}: abort requested ({ABORT_ANNOTATION}="
               f"{token})")


def _min_samples(body: dict[str, Any]) -> int:
    """``spec.rollback.minSamples`` of the object (its default when the spec does not parse)."""
    from sglang_operator.api.rollback import RollbackPolicy
    from sglang_operator.api.server import SpecError, parse_spec

    try:
        return parse_spec(body.get("spec") or {}).rollback.min_samples
    except SpecError:
        return RollbackPolicy().min_samples


@app.command()
def undo(
    name: Name,
    to: Annotated[str | None, typer.Option("--to", help="revision hash (default: the stable revision)")] = None,
    with_policy: Annotated[bool, typer.Option(
        "--with-policy", help="also restore spec.rollback and spec.strategy as the revision had them (default: "
                              "kept as they are)")] = False,
    field_manager: Annotated[str, typer.Option(
        help="the server-side apply field manager that owns the restored fields afterwards, when it applied the "
             "object (kubectl apply --server-side's default: kubectl)")] = undo_plan.SERVER_SIDE_MANAGER,
    namespace: Namespace = "default",
) -> None:
    """Write the spec of an earlier revision into the SGLangServer (like kubectl rollout undo); the operator then
    applies it as any spec change. replicas is kept, and so are spec.rollback and spec.strategy unless
    --with-policy. The revision runs the image digest it ran (recorded on its ControllerRevision): the revision a
    rollback restored keeps its pods. A later kubectl apply of your own file replaces what undo wrote, client-side
    (the last-applied-configuration annotation is updated) or --server-side (the fields belong to --field-manager).
    A rejected revision is refused: use retry."""
    from sglang_operator.api.crd import model_schema
    from sglang_operator.api.spec import SGLangServerSpec

    client = _client()
    schema = model_schema(SGLangServerSpec)
    picked: dict[str, Any] = {}

    def target_of(body: dict[str, Any]) -> dict[str, Any]:
        status = parse_status(body)
        target = to or status.stable_revision
        if not target:
            raise _fail(f"{name} has no stable revision yet: name one with --to")
        cr = _by_hash(_revisions(client, namespace, name), target)
        rev = cr["metadata"]["labels"][REVISION_LABEL]
        if any(r.revision == rev for r in status.rejected_revisions):
            raise _fail(f"revision {rev} was rejected by the rollback; to try it again use "
                        f"`sglang-operator retry {name}` after restoring its spec")
        picked.update(status=status, cr=cr, rev=rev)
        return dict(without_default_prompt(cr["data"]["spec"]))

    def refused(message: str) -> typer.Exit:
        return _fail(f"the API server refused the spec of revision {picked['rev']}"
                     f"{'' if with_policy else ' with the object' + chr(39) + 's rollback policy'}: {message}")

    def read() -> dict[str, Any]:
        return _server(client, namespace, name)

    written = specwrite.write_spec(client, namespace, name, read, target_of, schema, with_policy=with_policy,
                                   applier=field_manager, refused=refused)
    plan, status, cr, rev = written.plan, picked["status"], picked["cr"], picked["rev"]
    if plan.patch:
        typer.echo(f"sglangserver.{GROUP}/{name} spec set to revision {rev}")
    else:
        typer.echo(f"sglangserver.{GROUP}/{name} spec is revision {rev}'s already: nothing written")
    kept = [k for k in plan.kept if k != "replicas" or "replicas" in (cr["data"]["spec"] or {})]
    if kept:
        typer.echo(f"kept as they are: spec.{', spec.'.join(kept)}"
                   f"{'' if with_policy else ' (--with-policy restores the revision' + chr(39) + 's policy too)'}")
    typer.echo(_image_note(client, namespace, name, status, rev, cr, plan.spec))
    if plan.patch:
        typer.echo(specwrite.ownership(client, namespace, name, read, plan, schema))


def _image_note(client: Any, namespace: str, name: str, status: Any, rev: str, cr: dict[str, Any],
                spec: dict[str, Any]) -> str:
    """What image revision ``rev`` runs after ``undo``, and why (the operator's ``restore.as_ran``)."""
    from sglang_operator.builders.revision import has_digest, recorded_digest

    image = str((spec.get("sglang") or {}).get("image") or "")
    digest = recorded_digest(cr)
    if has_digest(image):
        return f"image: {image} (pinned in the spec)"
    if status.revision == rev:
        running = _running_image(client, namespace, name)
        shown = running or "as it runs"
        return f"image: revision {rev} runs already, its pods are kept ({shown})"
    if digest:
        return f"image: {image} pinned to {digest.rpartition('@')[2]}, the digest revision {rev} ran"
    return (f"image: {image} by its tag: revision {rev} has no recorded digest (its pods never reported an imageID), "
            "so the tag runs as it resolves now")


def _running_image(client: Any, namespace: str, name: str) -> str | None:
    """The image of the SGLangServer's Deployment (None: none, or unreadable)."""
    from lightkube import ApiError
    from lightkube.resources.apps_v1 import Deployment

    try:
        dep = client.get(Deployment, name, namespace=namespace).to_dict()
        return str(dep["spec"]["template"]["spec"]["containers"][0]["image"])
    except (ApiError, KeyError, IndexError):
        return None


def _add_tune() -> None:
    """``tune start|status|plot|apply`` (:mod:`sglang_operator.plugin.tune`)."""
    from sglang_operator.plugin.tune import app as tune_app

    app.add_typer(tune_app, name="tune")


_add_tune()


def main() -> None:
    """Entry point of the kubectl plugin ``kubectl-sglang``."""
    app(prog_name="kubectl sglang")
