"""The ``sglang-operator`` command: ``run`` the operator, print the ``crd``, ``render`` manifests offline,
``import`` an existing SGLang command line or systemd unit."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from sglang_operator.api.crd import crd_yaml
from sglang_operator.api.server import SpecError, parse

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_show_locals=False)


def _read(path: str) -> str:
    return sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")


@app.command()
def crd() -> None:
    """Print the SGLangServer CustomResourceDefinition (``sglang-operator crd > crds/sglangservers.yaml``)."""
    typer.echo(crd_yaml(), nl=False)


@app.command()
def render(
    file: Annotated[str, typer.Argument(help="SGLangServer YAML file (several documents allowed), or -")],
    namespace: Annotated[str, typer.Option(help="namespace when the object has none")] = "default",
) -> None:
    """Print the SGLang command line, warnings, Deployment and Service of each SGLangServer, offline.

    Exit status 1 when a spec is invalid (the messages the SpecValid condition would carry go to stderr).
    """
    from sglang_operator.builders import InvalidSpec
    from sglang_operator.builders import render as render_server

    docs: list[dict[str, Any]] = []
    failed = False
    for body in yaml.safe_load_all(_read(file)):
        if not body:
            continue
        body.setdefault("metadata", {}).setdefault("namespace", namespace)
        name = body["metadata"].get("name", "?")
        try:
            out = render_server(parse(body))
        except (SpecError, InvalidSpec) as err:
            failed = True
            for msg in getattr(err, "messages", None) or getattr(err, "errors", []):
                typer.echo(f"{name}: invalid: {msg}", err=True)
            continue
        header = [f"# {name}: SGLang {out.command.version}, revision {out.revision}", f"# {out.command.command_line}"]
        header += [f"# warning: {w}" for w in out.warnings]
        typer.echo("\n".join(header))
        docs += [out.deployment, out.service]
        typer.echo(yaml.safe_dump_all([out.deployment, out.service], sort_keys=False, explicit_start=True), nl=False)
    if failed:
        raise typer.Exit(1)


@app.command("import")
def import_(
    file: Annotated[str, typer.Argument(help="SGLang command line or systemd unit file, or - for stdin")],
    image: Annotated[str | None, typer.Option(help="SGLang image (default: from the command line, else "
                                                   "lmsysorg/sglang:v0.5.10-cu129)")] = None,
    name: Annotated[str | None, typer.Option(help="metadata.name (default: from the model)")] = None,
) -> None:
    """Turn an SGLang command line, or a systemd unit running one, into an SGLangServer YAML on stdout."""
    from sglang_operator.importer import ImportError_, import_text

    try:
        result = import_text(_read(file), image=image, name=name)
    except ImportError_ as err:
        typer.echo(f"import: {err}", err=True)
        raise typer.Exit(1) from None
    for note in result.notes:
        typer.echo(f"# note: {note}")
    typer.echo(yaml.safe_dump(result.server, sort_keys=False), nl=False)


@app.command()
def run(
    namespace: Annotated[list[str] | None, typer.Option("--namespace", "-n",
                                                        help="watch only this namespace (repeatable)")] = None,
    liveness: Annotated[str, typer.Option(help="kopf liveness endpoint URL")] = "http://0.0.0.0:8080/healthz",
    peering: Annotated[str | None, typer.Option(help="kopf peering name (default: standalone)")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run the operator (kopf) until SIGINT/SIGTERM."""
    try:
        runner = importlib.import_module("sglang_operator.runner")
    except ModuleNotFoundError as err:
        typer.echo(f"run: the operator runtime is missing ({err})", err=True)
        raise typer.Exit(2) from None
    runner.run(namespaces=namespace or (), liveness=liveness, peering=peering, verbose=verbose)


def _add_ledger_commands() -> None:
    """``history``, ``diff``, ``retry``, ``promote``, ``undo`` (also the kubectl plugin ``kubectl-sglang``)."""
    from sglang_operator.rollout.commands import app as ledger_app

    app.registered_commands.extend(ledger_app.registered_commands)


_add_ledger_commands()

if __name__ == "__main__":
    app()
