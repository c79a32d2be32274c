"""``tune start|status|plot|apply``: SGLangTunings from the command line (``sglang-operator tune ...`` and
``kubectl sglang tune ...``), against the cluster in ``$KUBECONFIG``.

- ``start SERVER``: creates an SGLangTuning of the server (validated by the API's Python mirror of the CRD's rules
  first: a refused option never reaches the cluster; an option value every point of which the server's release
  refuses, e.g. ``--topk 2`` on a ``specV2`` server, is refused too, with one of the release's messages;
  ``--dry-run`` prints it instead, with the plan: valid points, the refused ones per rule with an example message,
  trials at most, wall time and GPU-hours, :mod:`sglang_operator.plugin.tunecost`).
- ``status NAME``: the trials (settings, verdict, objective, figures per concurrency level), the recommendation and
  its speedup over no speculative decoding; ``-o json``.
- ``plot NAME -o FILE.png``: the objective over (steps, draft tokens) per topk and concurrency level, the winner
  marked (matplotlib, the optional extra ``plot``).
- ``best [MODEL]``: the known best speculative settings of the namespace's finished tunings, per model, GPU
  product, parallelism, release, workload and concurrency level (:mod:`sglang_operator.plugin.tunebest`); ``-o
  json``.
- ``apply NAME``: writes the recommendation into the server's spec the way ``undo`` writes
  (:mod:`sglang_operator.plugin.specwrite`: a later ``kubectl apply`` of your own file replaces it field for field)
  and prints the YAML snippet for a Git repository. The operator never writes it itself.

Exit status 1 for an object that does not exist or a write that is refused; 2 for usage errors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from sglang_operator.api.names import did_you_mean
from sglang_operator.api.server import SpecError
from sglang_operator.api.tuning import SGLangTuning, parse_tuning
from sglang_operator.api.tuning_spec import TuningMode
from sglang_operator.plugin import specwrite, tunebest, tuneplan
from sglang_operator.plugin import undo as undo_plan

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Search a server's speculative settings (SGLangTuning): start, status, plot, best, apply.")
Namespace = Annotated[str, typer.Option("--namespace", "-n", help="namespace of the SGLangTuning and its server")]
TuningName = Annotated[str, typer.Argument(help="name of the SGLangTuning")]


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _make_client() -> Any:
    """A lightkube client of ``$KUBECONFIG``'s cluster; raises when there is no configuration."""
    from lightkube import Client

    return Client(field_manager="sglang-operator-cli")


def _client() -> Any:
    try:
        return _make_client()
    except Exception as exc:  # no kubeconfig, unreadable config: a clear message, no traceback
        raise _fail(f"no cluster to talk to: {exc}") from None


def _names(client: Any, resource: Any, namespace: str) -> list[str]:
    from lightkube import ApiError

    try:
        return [str(o.metadata.name) for o in client.list(resource, namespace=namespace)]
    except ApiError:
        return []


def _get(client: Any, resource: Any, kind: str, namespace: str, name: str) -> dict[str, Any]:
    from lightkube import ApiError

    try:
        obj: dict[str, Any] = client.get(resource, name, namespace=namespace).to_dict()
    except ApiError as exc:
        hint = did_you_mean(name, _names(client, resource, namespace)) if exc.status.code == 404 else ""
        raise _fail(f"{kind} {namespace}/{name}: {exc.status.message}{hint}") from None
    return obj


def _tuning(client: Any, namespace: str, name: str) -> SGLangTuning:
    from sglang_operator.io.kube import sglangtuning_resource

    body = _get(client, sglangtuning_resource(), "SGLangTuning", namespace, name)
    try:
        return parse_tuning(body)
    except SpecError as err:
        raise _fail(f"SGLangTuning {namespace}/{name} does not parse: {err}") from None


def _server(client: Any, namespace: str, name: str) -> dict[str, Any]:
    from sglang_operator.io.kube import sglangserver_resource

    return _get(client, sglangserver_resource(), "SGLangServer", namespace, name)


@app.command()
def start(
    server: Annotated[str, typer.Argument(help="name of the SGLangServer to tune")],
    namespace: Namespace = "default",
    name: Annotated[str | None, typer.Option(help="name of the SGLangTuning (default: <server>-tune-<random>)")]
    = None,
    steps: Annotated[str | None, typer.Option(help="--speculative-num-steps values: 1-8, 1-8/2 or 1,2,4")] = None,
    topk: Annotated[str | None, typer.Option(
        help="--speculative-eagle-topk values (default 1: chains; a tree, topk > 1, needs a server without specV2)")]
    = None,
    draft_tokens: Annotated[str | None, typer.Option(
        help="--speculative-num-draft-tokens values (default: steps + 1 for chains, up to steps x topk + 1 for "
             "trees)")] = None,
    adaptive: Annotated[bool, typer.Option(help="also run SGLang's adaptive mode (0.5.11 on)")] = False,
    max_running_requests: Annotated[str | None, typer.Option(help="--max-running-requests values")] = None,
    cuda_graph_max_bs: Annotated[str | None, typer.Option(help="CUDA-graph batch size values")] = None,
    objective: Annotated[str | None, typer.Option(
        help="decodeTokensPerSecond (default), outputTokensPerSecond or goodput")] = None,
    objective_concurrency: Annotated[int | None, typer.Option(
        help="outputTokensPerSecond: the level it is measured at (default: the highest --concurrency)")] = None,
    max_itl_p95: Annotated[float | None, typer.Option(help="goodput: p95 inter-token latency at most, s")] = None,
    max_ttft_p95: Annotated[float | None, typer.Option(help="goodput: p95 time to first token at most, s")] = None,
    goal: Annotated[float | None, typer.Option(help="stop once a trial reaches this objective")] = None,
    concurrency: Annotated[str | None, typer.Option(help="levels, LEVEL or LEVEL:WEIGHT: 1,16:2")] = None,
    prompt: Annotated[list[str] | None, typer.Option(help="a prompt (repeat; default: the built-in eight)")] = None,
    max_output_tokens: Annotated[int | None, typer.Option(help="max_tokens of every request (512)")] = None,
    seconds_per_level: Annotated[int | None, typer.Option(help="seconds each level is measured (30)")] = None,
    warmup_seconds: Annotated[int | None, typer.Option(help="seconds of load not measured (10)")] = None,
    repetitions: Annotated[int | None, typer.Option(help="measurements per level, the noise estimate (2)")] = None,
    max_trials: Annotated[int | None, typer.Option(help="trials at most (24)")] = None,
    max_failed_trials: Annotated[int | None, typer.Option(help="failed trials that end the tuning (3)")] = None,
    max_duration_seconds: Annotated[int | None, typer.Option(help="wall time at most, s (7200)")] = None,
    trial_deadline_seconds: Annotated[int | None, typer.Option(help="seconds a trial may take to be Ready")] = None,
    algorithm: Annotated[str | None, typer.Option(help="Default, Grid, Random or TPE")] = None,
    seed: Annotated[int | None, typer.Option(help="seed of the random choices")] = None,
    start_steps: Annotated[int | None, typer.Option(
        help="Default search: the numSteps its climb starts from, e.g. the server's own (default: 3)")] = None,
    mode: Annotated[str | None, typer.Option(help="Shadow (default: other GPUs) or InPlace")] = None,
    allow_disruption: Annotated[bool, typer.Option(
        help="InPlace: allow every trial to restart the server's pods")] = False,
    dry_run: Annotated[bool, typer.Option(help="print the SGLangTuning instead of creating it")] = False,
) -> None:
    """Create an SGLangTuning of SERVER: search the speculative settings given (default: 1-8 steps, chains), measure
    each trial under the workload, recommend the best. Every option is checked against the CRD's rules before
    anything is sent, and every value of --steps, --topk, --draft-tokens, --max-running-requests and
    --cuda-graph-max-bs against the server's release: a value no point can run with is refused (exit 2)."""
    opts = tuneplan.StartOptions(
        server=server, namespace=namespace, name=name, steps=steps, topk=topk, draft_tokens=draft_tokens,
        adaptive=adaptive, max_running_requests=max_running_requests, cuda_graph_max_bs=cuda_graph_max_bs,
        objective=objective, objective_concurrency=objective_concurrency, max_itl_p95=max_itl_p95,
        max_ttft_p95=max_ttft_p95, goal=goal, concurrency=concurrency, prompts=tuple(prompt or ()),
        max_output_tokens=max_output_tokens, seconds_per_level=seconds_per_level, warmup_seconds=warmup_seconds,
        repetitions=repetitions, max_trials=max_trials, max_failed_trials=max_failed_trials,
        max_duration_seconds=max_duration_seconds, trial_deadline_seconds=trial_deadline_seconds,
        algorithm=algorithm, seed=seed, start_steps=start_steps, mode=mode, allow_disruption=allow_disruption)
    try:
        body = tuneplan.tuning_body(opts)
    except tuneplan.UsageError as err:
        raise _fail(str(err), 2) from None
    if dry_run:
        typer.echo(yaml.safe_dump(body, sort_keys=False), nl=False)
        lines, unused = _plan(body, namespace, server)
        for line in lines:
            typer.echo(line)
        if unused:
            raise _fail("; ".join(unused), 2)
        return
    from lightkube import ApiError

    from sglang_operator.io.kube import sglangtuning_resource

    client = _client()
    server_body = _server(client, namespace, server)  # a missing server: say so (with the closest name) first
    unused = _unused(body, server_body)
    if unused:
        raise _fail("; ".join(unused), 2)
    resource = sglangtuning_resource()
    try:
        created = client.create(resource(metadata=body["metadata"], spec=body["spec"]), namespace=namespace)
    except ApiError as exc:
        raise _fail(f"the API server refused the SGLangTuning: {exc.status.message}") from None
    typer.echo(f"sglangtuning.{body['apiVersion'].split('/')[0]}/{created.metadata.name} created "
               f"(kubectl sglang tune status {created.metadata.name} -n {namespace})")


def _plan(body: dict[str, Any], namespace: str, server: str) -> tuple[list[str], list[str]]:
    """The dry run's plan (:mod:`sglang_operator.plugin.tunecost`) as comment lines, from the server's spec and its
    pods when a cluster answers, else one line saying why there is none; and the option values no point could run
    with (:func:`~sglang_operator.plugin.tunecost.unused_values`: refused)."""
    from lightkube.resources.core_v1 import Pod

    from sglang_operator.api.server import parse
    from sglang_operator.io.kube import sglangserver_resource
    from sglang_operator.plugin import tunecost

    try:  # quietly: a dry run prints the object whether or not a cluster answers
        client = _make_client()
        server_body = client.get(sglangserver_resource(), server, namespace=namespace).to_dict()
        pods = [p.to_dict() for p in client.list(Pod, namespace=namespace,
                                                  labels={"app.kubernetes.io/instance": server})]
    except Exception:  # no cluster, no such server
        return [f"# no plan: SGLangServer {namespace}/{server} could not be read (the trials, wall time and GPU-hours "
                "need its spec)"], []
    try:
        spec = SGLangTuning.model_validate(body).spec
        cost = tunecost.cost(spec, parse(server_body).spec, pods)
    except (SpecError, ValueError) as err:
        return [f"# no plan: {err}"], []
    return tunecost.lines(cost), list(cost.unused)


def _unused(body: dict[str, Any], server_body: dict[str, Any]) -> list[str]:
    """:func:`~sglang_operator.plugin.tunecost.unused_values` of the tuning ``body`` on the server ``server_body``;
    none when the server's spec does not parse or render (the operator says why in the tuning's status)."""
    from sglang_operator.api.server import parse
    from sglang_operator.decisions.tuning import trials as plan
    from sglang_operator.plugin import tunecost

    try:
        spec = SGLangTuning.model_validate(body).spec
        valid, invalid = plan.points(spec.parameters, parse(server_body).spec, spec.mode is TuningMode.IN_PLACE)
    except (SpecError, ValueError):
        return []
    return tunecost.unused_values(spec, valid, invalid)


@app.command()
def status(name: TuningName, namespace: Namespace = "default",
           output: Annotated[str, typer.Option("--output", "-o", help="table or json")] = "table") -> None:
    """The trials of an SGLangTuning with their figures per concurrency level, the recommendation (★) and its
    speedup over the control trial without speculative decoding (◇)."""
    tuning = _tuning(_client(), namespace, name)
    _print_status(tuning, output)


def _print_status(tuning: SGLangTuning, output: str) -> None:
    if output == "json":
        typer.echo(json.dumps(tuneplan.status_json(tuning), indent=2))
        return
    if output != "table":
        raise _fail(f"--output {output!r} is not one of table, json{did_you_mean(output, ['table', 'json'])}", 2)
    header, rows = tuneplan.status_rows(tuning)
    table = Table(title=f"SGLangTuning {tuning.namespace}/{tuning.metadata.get('name')} of "
                  f"{tuning.spec.server_ref.name} ({tuneplan.objective_title(tuning)})",
                  title_justify="left")
    for col in header:
        table.add_column(col, no_wrap=True)
    for row in rows:
        table.add_row(*row)
    Console(width=200).print(table)
    for line in tuneplan.reason_lines(tuning):
        typer.echo(line)
    for line in tuneplan.summary_lines(tuning):
        typer.echo(line)


@app.command()
def plot(name: TuningName, output: Annotated[Path, typer.Option("--output", "-o", help="image file (PNG)")],
         namespace: Namespace = "default") -> None:
    """Draw the objective over (steps, draft tokens), one panel per topk and concurrency level, the winner marked
    (needs matplotlib: pip install 'sglang-operator[plot]')."""
    from sglang_operator.plugin.tuneplot import PlotUnavailable, plot_tuning

    tuning = _tuning(_client(), namespace, name)
    try:
        written = plot_tuning(tuning, output)
    except PlotUnavailable as err:
        raise _fail(str(err)) from None
    except ValueError as err:
        raise _fail(str(err)) from None
    typer.echo(f"wrote {written}")


@app.command()
def best(model: Annotated[str | None, typer.Argument(help="only models whose path contains this")] = None,
         namespace: Namespace = "default",
         output: Annotated[str, typer.Option("--output", "-o", help="table or json")] = "table") -> None:
    """The best speculative settings the namespace's finished SGLangTunings measured, per model, GPU product,
    parallelism, SGLang release, workload and concurrency level. A server running settings measured clearly worse
    gets condition SpeculativeSettings=False (reason BelowKnownBest)."""
    from lightkube import ApiError

    from sglang_operator.io.kube import sglangtuning_resource

    if output not in ("table", "json"):
        raise _fail(f"--output {output!r} is not one of table, json{did_you_mean(output, ['table', 'json'])}", 2)
    client = _client()
    try:
        bodies = [o.to_dict() for o in client.list(sglangtuning_resource(), namespace=namespace)]
    except ApiError as exc:
        raise _fail(f"SGLangTunings of {namespace} not listed: {exc.status.message}") from None
    known = tunebest.known_best(bodies, model)
    if output == "json":
        typer.echo(known.model_dump_json(by_alias=True, indent=2))
        return
    if not known.tables:
        typer.echo(f"no finished SGLangTuning in {namespace}" + (f" of a model matching {model!r}" if model else "")
                   + " measured anything yet")
        return
    table = Table(title=f"Known best speculative settings in {namespace} (decode tok/s at concurrency 1, output "
                  "tok/s above)", title_justify="left")
    for col in tunebest.HEADER:
        table.add_column(col, no_wrap=True)
    for row in tunebest.rows(known):
        table.add_row(*row)
    Console(width=250).print(table)


@app.command()
def apply(
    name: TuningName,
    namespace: Namespace = "default",
    level: Annotated[int | None, typer.Option(
        "--concurrency", help="apply the best at this concurrency level instead of the overall best")] = None,
    field_manager: Annotated[str, typer.Option(
        help="the server-side apply field manager that owns the written fields afterwards, when it applied the "
             "object (kubectl apply --server-side's default: kubectl)")] = undo_plan.SERVER_SIDE_MANAGER,
    server_name: Annotated[str | None, typer.Option(
        "--server", help="write into this SGLangServer of the namespace instead of the tuned one (one of the same "
                         "model, GPUs and release: its SpeculativeSettings condition names the tuning)")] = None,
) -> None:
    """Write the recommendation of an SGLangTuning into its server's spec (the operator never does: GitOps tools own
    the spec) and print the YAML snippet for a Git repository. Written like undo writes: a later kubectl apply of
    your own file replaces it, client-side (last-applied annotation) or --server-side (--field-manager owns it).
    The new revision is judged by the rollback analysis like any other."""
    from sglang_operator.api.crd import model_schema
    from sglang_operator.api.spec import SGLangServerSpec

    client = _client()
    tuning = _tuning(client, namespace, name)
    st = tuning.status
    best = st.best if st else None
    if level is not None and st is not None:
        best = next((b for b in st.best_per_level if b.concurrency == level), None)
        if best is None:
            known = ", ".join(str(b.concurrency) for b in st.best_per_level) or "none"
            raise _fail(f"SGLangTuning {name} has no best point at concurrency {level} (levels: {known})")
    if best is None:
        raise _fail(f"SGLangTuning {name} has no recommendation yet (phase {st.phase if st else None}): see "
                    f"`kubectl sglang tune status {name} -n {namespace}`")
    server = server_name or tuning.spec.server_ref.name
    schema = model_schema(SGLangServerSpec)

    def read() -> dict[str, Any]:
        return _server(client, namespace, server)

    def target_of(body: dict[str, Any]) -> dict[str, Any]:
        from sglang_operator import builders
        from sglang_operator.api.server import parse

        spec = body.get("spec") or {}
        try:
            target = tuneplan.winner_spec(spec, best.settings)
            builders.render(parse({**body, "spec": target, "status": None}))
        except tuneplan.UsageError as err:
            raise _fail(str(err)) from None
        except SpecError as err:
            raise _fail(f"the winner {best.summary} does not make a valid spec of {server}: {err}") from None
        except builders.InvalidSpec as err:
            raise _fail(f"the winner {best.summary} is refused for {server}'s release: {err}") from None
        return target

    def refused(message: str) -> typer.Exit:
        return _fail(f"the API server refused the winner {best.summary} for {server}: {message}")

    written = specwrite.write_spec(client, namespace, server, read, target_of, schema, with_policy=False,
                                   applier=field_manager, refused=refused)
    where = f" (the best at concurrency {level})" if level is not None else ""
    if written.plan.patch:
        typer.echo(f"sglangserver/{server} spec set to {best.summary}{where} from {name} (changed: spec."
                   f"{', spec.'.join(tuneplan.changed_keys(written.body.get('spec') or {}, written.target))})")
        typer.echo(specwrite.ownership(client, namespace, server, read, written.plan, schema, what="tune apply"))
    else:
        typer.echo(f"sglangserver/{server} spec has {best.summary} already: nothing written")
    typer.echo("for your Git repository (the fields of the winner):")
    typer.echo(tuneplan.snippet(server, namespace, written.target, tuneplan.winner_keys(best.settings)), nl=False)
