"""``history``, ``diff``, ``retry``, ``promote`` and ``undo`` against the cluster in ``$KUBECONFIG`` (lightkube's
sync client). Registered on the ``sglang-operator`` command and shipped as the kubectl plugin ``kubectl-sglang``
(``kubectl sglang history NAME``).

- ``retry``: a rejected revision is deployed again only when the annotation ``sglang-operator.io/retry`` changes
  value; this writes the current time into it.
- ``promote``: accept the revision that serves now as the stable one (e.g. a deliberately slower but cheaper
  configuration): writes its hash into the annotation ``sglang-operator.io/promote``; the operator promotes it
  with the median of its samples so far as the baseline.
- ``undo``: a user's rollback, like ``kubectl rollout undo``: writes the spec of a revision (default: the stable
  one) into the object. A rejected revision is refused (use ``retry``).
Exit status 1 for a server or revision that does not exist or is refused; 2 for usage errors (typer's).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from sglang_operator.api.base import GROUP, PROMOTE_ANNOTATION, RETRY_ANNOTATION
from sglang_operator.api.server import parse_status
from sglang_operator.plugin import view

app = typer.Typer(add_completion=False, no_args_is_help=True, help="The revision ledger of an SGLangServer: "
                  "history, diff, retry, promote and undo.", pretty_exceptions_enable=False)
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
    matches = [r for r in revisions if r["metadata"]["labels"].get(f"{GROUP}/revision", "").startswith(rev)]
    if len(matches) != 1:
        known = ", ".join(r["metadata"]["labels"].get(f"{GROUP}/revision", "?") for r in revisions) or "none"
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


def _fmt(value: float | None, digits: int) -> str:
    return view.ABSENT if value is None else f"{value:.{digits}f}"


@app.command()
def history(name: Name, namespace: Namespace = "default", output: Output = "table") -> None:
    """List every revision in the ledger with its verdict and measured figures (stable one marked ★, the one
    serving marked ▶)."""
    client = _client()
    body = _server(client, namespace, name)
    rows = view.history_rows(parse_status(body), _revisions(client, namespace, name), dt.datetime.now(dt.UTC))
    if output == "json":
        typer.echo(json.dumps([r.as_json() for r in rows], indent=2))
        return
    table = Table(title=f"SGLangServer {namespace}/{name}", title_justify="left")
    for col in ("", "REVISION", "AGE", "VERDICT", "TOK/S", "ACCEPT LEN", "SAMPLES", "IMAGE"):
        table.add_column(col, no_wrap=col != "IMAGE")
    for r in rows:
        mark = ("★" if r.stable else "") + ("▶" if r.serving else "")
        table.add_row(mark, r.revision, r.age, r.verdict, _fmt(r.tokens_per_second, 1), _fmt(r.accept_length, 2),
                      view.ABSENT if r.samples is None else str(r.samples), r.image)
    Console(width=200).print(table)
    for r in rows:
        if r.reason:
            typer.echo(r.reason if r.reason.startswith(r.revision) else f"{r.revision}: {r.reason}")


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
    status = parse_status(body)
    revisions = _revisions(client, namespace, name)
    rev_a = rev_a or _spec_revision(body) or status.revision
    rev_b = rev_b or status.stable_revision
    if not rev_a or not rev_b:
        raise _fail("name two revisions: this server has no stable revision yet")
    a, b = _by_hash(revisions, rev_a), _by_hash(revisions, rev_b)
    ha, hb = (r["metadata"]["labels"][f"{GROUP}/revision"] for r in (a, b))
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
    Console(width=200).print(table)
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
    """Accept the revision that serves now as the stable revision (its samples so far become the baseline)."""
    client = _client()
    body = _server(client, namespace, name)
    serving = parse_status(body).revision
    if not serving:
        raise _fail(f"{name} serves no revision yet")
    _annotate(client, namespace, name, PROMOTE_ANNOTATION, serving)
    typer.echo(f"sglangserver.{GROUP}/{name} promotion of revision {serving} requested")


@app.command()
def undo(
    name: Name,
    to: Annotated[str | None, typer.Option("--to", help="revision hash (default: the stable revision)")] = None,
    namespace: Namespace = "default",
) -> None:
    """Write the spec of an earlier revision into the SGLangServer (like kubectl rollout undo). The operator then
    applies it as any spec change. A rejected revision is refused: use retry."""
    from lightkube.types import PatchType

    from sglang_operator.io.kube import sglangserver_resource

    client = _client()
    body = _server(client, namespace, name)
    status = parse_status(body)
    target = to or status.stable_revision
    if not target:
        raise _fail(f"{name} has no stable revision yet: name one with --to")
    cr = _by_hash(_revisions(client, namespace, name), target)
    rev = cr["metadata"]["labels"][f"{GROUP}/revision"]
    if any(r.revision == rev for r in status.rejected_revisions):
        raise _fail(f"revision {rev} was rejected by the rollback; to try it again use "
                    f"`sglang-operator retry {name}` after restoring its spec")
    patch = [{"op": "replace", "path": "/spec", "value": cr["data"]["spec"]}]
    client.patch(sglangserver_resource(), name, patch, namespace=namespace, patch_type=PatchType.JSON)
    typer.echo(f"sglangserver.{GROUP}/{name} spec set to revision {rev}")


def main() -> None:
    """Entry point of the kubectl plugin ``kubectl-sglang``."""
    app(prog_name="kubectl sglang")
