"""The ``sglang-operator`` command: ``run`` the operator, print the ``crd``, ``render`` manifests offline,
``import`` an existing SGLang command line or systemd unit, print a ``prometheus-config``.

Exit status: 0 done, 1 invalid input (a file that cannot be read, a spec that is refused, a command line that
cannot be imported; the message on stderr, never a traceback), 2 usage (a wrong option or argument).
Help texts are the docstrings shown as plain text (RST ````literal```` marks removed: :func:`plain`).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from sglang_operator.api import crd as crds
from sglang_operator.api.server import SpecError, parse
from sglang_operator.decisions.sampling import limits as sampling_limits
from sglang_operator.decisions.tuning.hold import MAX_SECONDS as HOLD_MAX_SECONDS
from sglang_operator.decisions.tuning.trialload import TRIAL_REQUEST_RATE
from sglang_operator.decisions.tuning.trials import DURATION_CAP_SECONDS
from sglang_operator.io.trialstreams import TRIAL_STREAMS
from sglang_operator.process.leader import LeaderElectionConfig

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_show_locals=False,
                  rich_markup_mode=None,  # click's plain help: rich's panels cut long option names at 80 columns
                  help="Run the SGLang operator, print its CRD, render SGLangServer manifests offline, or import an "
                       "SGLang command line or systemd unit.")


def plain(text: str | None) -> str | None:
    """A docstring as help text: RST ````literal```` and ``:func:`x``` marks removed."""
    if text is None:
        return None
    text = re.sub(r":[a-z]+:`([^`]+)`", r"\1", text)
    return text.replace("``", "")


def _read(path: str, command: str) -> str:
    """The text of ``path`` (``-``: stdin); a file that cannot be read ends the command with status 1."""
    try:
        return sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as err:
        typer.echo(f"{command}: cannot read {path}: {err.strerror or err}", err=True)
    except UnicodeDecodeError as err:
        typer.echo(f"{command}: {path} is not UTF-8 text ({err.reason} at byte {err.start})", err=True)
    raise typer.Exit(1)


def _version(value: bool) -> None:
    if not value:
        return
    from sglang_operator import __version__
    from sglang_operator.sglang import versions

    typer.echo(f"sglang-operator {__version__} (SGLang releases known up to {max(versions.SUPPORTED)})")
    raise typer.Exit(0)


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="print the operator's version and the newest SGLang release it "
                                               "knows, then exit")] = False,
) -> None:
    """Run the SGLang operator, print its CRD, render SGLangServer manifests offline, or import an SGLang
    command line or systemd unit."""


@app.command()
def crd(
    kind: Annotated[str | None, typer.Argument(
        help=f"print only this kind's CRD: {', '.join(crds.KINDS)} (default: all, as one YAML stream)")] = None,
    write: Annotated[Path | None, typer.Option(
        help="write each CRD into this directory as the committed copies are named (crds/sglangservers.yaml, "
             "crds/sglangtunings.yaml) instead of printing")] = None,
) -> None:
    """Print the CustomResourceDefinitions (SGLangServer, SGLangTuning), or write them (``sglang-operator crd
    --write crds/``, then ``--write charts/sglang-operator/files/crds/`` for the chart's copies)."""
    if kind is not None and kind not in crds.KINDS:
        typer.echo(f"unknown kind {kind!r}; one of {', '.join(crds.KINDS)}", err=True)
        raise typer.Exit(2)
    if write is not None:
        write.mkdir(parents=True, exist_ok=True)
        for name, text in crds.CRD_FILES.items():
            if kind is None or text is crds.KINDS[kind]:
                (write / name).write_text(text())
                typer.echo(f"wrote {write / name}")
        return
    typer.echo(crds.KINDS[kind]() if kind else crds.all_crds_yaml(), nl=False)


@app.command()
def render(
    file: Annotated[str, typer.Argument(help="SGLangServer YAML file (several documents allowed), or -")],
    namespace: Annotated[str, typer.Option(help="namespace when the object has none")] = "default",
    admission_level: Annotated[str, typer.Option(
        help="the chart's admission policy level to check each SGLangServer against: baseline (the chart's "
             "default), restricted, or off (a cluster without the policy)")] = "baseline",
    allowed_host_path: Annotated[list[str] | None, typer.Option(
        help="a hostPath prefix the policy allows (admissionPolicy.allowedHostPaths; repeatable)")] = None,
    host_path_writes: Annotated[str, typer.Option(
        help="whether an allowed hostPath may be written (admissionPolicy.hostPathWrites): Forbidden (read-only "
             "mounts only), Allowed, or OwnNamespace (only under <allowed prefix>/<namespace>)")] = "Forbidden",
    allowed_service_account: Annotated[list[str] | None, typer.Option(
        help="a spec.serviceAccountName the policy allows, NAME or NAMESPACE/NAME "
             "(admissionPolicy.allowedServiceAccounts; repeatable)")] = None,
    operator_service_account: Annotated[str, typer.Option(
        help="the operator's ServiceAccount as NAMESPACE/NAME, never allowed as spec.serviceAccountName (the "
             "chart's: <release namespace>/<release fullname>)")] = "sglang-operator/sglang-operator",
    prometheus_address: Annotated[str | None, typer.Option(
        help="the operator's --prometheus-address (the chart's autoscaling.prometheusAddress): the Prometheus a "
             "ScaledObject queries when spec.autoscaling.prometheus is unset")] = None,
    allowed_prometheus_address: Annotated[list[str] | None, typer.Option(
        help="an address spec.autoscaling.prometheus.address may name besides --prometheus-address "
             "(autoscaling.allowedPrometheusAddresses; repeatable; * allows any)")] = None,
    allow_query_metric: Annotated[bool, typer.Option(
        help="spec.autoscaling.metric query is allowed (autoscaling.allowQueryMetric)")] = False,
) -> None:
    """Print the SGLang command line, warnings, Deployment and Service of each SGLangServer, and its KEDA
    ScaledObject (spec.autoscaling, mode KEDA), offline.

    Each SGLangServer is first held to the chart's admission policy (docs/security.md) at --admission-level: a
    refusal is printed as the API server would give it. The policy's authorization checks cannot run offline:
    a note names each Secret the creating user must be allowed to get. A ScaledObject the operator would not write
    (spec.autoscaling naming a Prometheus or a query the admin does not allow: --prometheus-address,
    --allowed-prometheus-address, --allow-query-metric) is a note, as is one without a Prometheus address.

    Exit status 1 when a spec is invalid or refused (the messages the SpecValid condition or the API server would
    carry go to stderr).
    """
    from sglang_operator.builders import InvalidSpec, admission, refusals
    from sglang_operator.builders import render as render_server
    from sglang_operator.builders.admission_kinds import HostPathWrites, Level, Params
    from sglang_operator.builders.autoscaling import MissingPrometheusAddress, scaled_object
    from sglang_operator.builders.autoscaling_tenancy import PrometheusTenancy

    tenancy = PrometheusTenancy.of(prometheus_address, allowed_prometheus_address or (), allow_query_metric)
    params: Params | None = None
    if admission_level != "off":
        op_ns, _, op_sa = operator_service_account.rpartition("/")
        try:
            params = Params(Level(admission_level), tuple(allowed_host_path or ()),
                            tuple(allowed_service_account or ()), op_sa, op_ns,
                            allowed_prometheus_addresses=tenancy.allowed_addresses,
                            allow_query_metric=tenancy.allow_query)
        except ValueError:
            typer.echo(f"render: --admission-level is baseline, restricted or off, not {admission_level!r}", err=True)
            raise typer.Exit(2) from None
        try:
            params = dataclasses.replace(params, host_path_writes=HostPathWrites(host_path_writes))
        except ValueError:
            typer.echo(f"render: --host-path-writes is Forbidden, Allowed or OwnNamespace, not {host_path_writes!r}",
                       err=True)
            raise typer.Exit(2) from None
        if not op_ns or not op_sa:
            typer.echo(f"render: --operator-service-account is NAMESPACE/NAME, not {operator_service_account!r}",
                       err=True)
            raise typer.Exit(2)

    docs: list[dict[str, Any]] = []
    failed = False
    try:
        bodies = list(yaml.safe_load_all(_read(file, "render")))
    except yaml.YAMLError as err:
        typer.echo(f"render: {file} is not valid YAML: {err}", err=True)
        raise typer.Exit(1) from None
    servers = 0
    for index, body in enumerate(bodies):
        if not body:
            continue
        kind = body.get("kind") if isinstance(body, dict) else None
        if kind != "SGLangServer" or not isinstance(body, dict):
            name = (body.get("metadata") or {}).get("name", "") if isinstance(body, dict) else ""
            what = f"{kind or type(body).__name__} {name}".strip()
            typer.echo(f"render: skipped document {index + 1} ({what}): not an SGLangServer", err=True)
            continue
        servers += 1
        body.setdefault("metadata", {}).setdefault("namespace", namespace)
        name = body["metadata"].get("name", "?")
        try:
            server = parse(body)
            out = render_server(server)
        except (SpecError, InvalidSpec) as err:
            failed = True
            for msg in refusals(body) or getattr(err, "messages", None) or getattr(err, "errors", []):
                typer.echo(f"{name}: invalid: {msg}", err=True)
            continue
        verdict = admission.check(body, params) if params is not None else admission.Verdict()
        if verdict.refusals:
            failed = True
            for msg in verdict.refusals:
                typer.echo(f"{name}: refused by the admission policy ({admission_level}): {msg}", err=True)
            continue
        header = [f"# {name}: SGLang {out.command.version}, revision {out.revision}", f"# {out.command.command_line}"]
        header += [f"# warning: {w}" for w in out.warnings]
        header += [f"# note: {n}" for n in getattr(out, "notes", ())]
        header += [f"# note: admission policy: {n}" for n in verdict.secrets]
        objs = [out.deployment, out.service]
        try:
            refused = tenancy.refusal(server.spec.autoscaling)  # the operator's own check: Autoscaling=False
            scaler = scaled_object(server, prometheus_address) if refused is None else None
            if refused is not None:
                header.append(f"# note: no ScaledObject: {refused}")
        except MissingPrometheusAddress as err:  # the operator reports it in a condition: not an invalid spec
            header.append(f"# note: no ScaledObject: {err}")
            scaler = None
        objs += [scaler] if scaler is not None else []
        typer.echo("\n".join(header))
        docs += objs
        typer.echo(yaml.safe_dump_all(objs, sort_keys=False, explicit_start=True), nl=False)
    if servers == 0:
        typer.echo(f"render: {file} holds no SGLangServer", err=True)
        raise typer.Exit(1)
    if failed:
        raise typer.Exit(1)


@app.command("import")
def import_(
    file: Annotated[str, typer.Argument(help="SGLang command line or systemd unit file, or - for stdin")],
    image: Annotated[str | None, typer.Option(help="SGLang image, whose tag names the release the flags are read "
                                                   "for (default: from the command line, else "
                                                   "lmsysorg/sglang:v0.5.10-cu129)")] = None,
    name: Annotated[str | None, typer.Option(help="metadata.name (default: from the model)")] = None,
) -> None:
    """Turn an SGLang command line, or a systemd unit running one, into an SGLangServer YAML on stdout.

    The notes (YAML comments) say which image and SGLang release were assumed and what was dropped or
    translated; when render would refuse the result, or the chart's default admission policy would (e.g. the
    hostPath model cache HF_HOME becomes), the reasons follow as warnings (also on stderr).
    """
    from sglang_operator.plugin.importer import ImportError_, import_text

    try:
        result = import_text(_read(file, "import"), image=image, name=name)
    except ImportError_ as err:
        typer.echo(f"import: {err}", err=True)
        raise typer.Exit(1) from None
    for note in result.notes:
        typer.echo(f"# note: {note}")
    for refusal in result.refusals:
        typer.echo(f"# warning: sglang-operator render would refuse this: {refusal}")
        typer.echo(f"import: warning: sglang-operator render would refuse the result: {refusal}", err=True)
    for refusal in result.admission:
        typer.echo(f"# warning: the chart's default admission policy would refuse this: {refusal}")
        typer.echo(f"import: warning: the chart's default admission policy (admissionPolicy values as shipped) would "
                   f"refuse the result: {refusal}", err=True)
    typer.echo(yaml.safe_dump(result.server, sort_keys=False), nl=False)


def _leader_election(enabled: bool, name: str, namespace: str | None, lease_duration: float,
                     renew_deadline: float, retry_period: float) -> LeaderElectionConfig | None:
    """The Lease settings of ``run --leader-elect``, or None; exit status 2 on inconsistent timings."""
    if not enabled:
        return None
    from pydantic import ValidationError

    from sglang_operator.process.leader import default_identity, default_namespace

    try:
        return LeaderElectionConfig(name=name, namespace=namespace or default_namespace(), identity=default_identity(),
                                    lease_duration=lease_duration, renew_deadline=renew_deadline,
                                    retry_period=retry_period)
    except ValidationError as err:
        for e in err.errors():
            typer.echo(f"run: leader election: {e['msg']}", err=True)
        raise typer.Exit(2) from None


@app.command()
def run(
    namespace: Annotated[list[str] | None, typer.Option("--namespace", "-n",
                                                        help="watch only this namespace (repeatable)")] = None,
    liveness: Annotated[str, typer.Option(help="kopf liveness endpoint URL")] = "http://0.0.0.0:8080/healthz",
    peering: Annotated[str | None, typer.Option(help="kopf peering name (default: standalone)")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="log at DEBUG: every HTTP request (httpx, "
                                          "lightkube) and kopf's per-event messages; default INFO: transitions "
                                          "only")] = False,
    leader_elect: Annotated[bool, typer.Option(
        help="take a coordination.k8s.io/v1 Lease before starting anything, renew it, release it on SIGTERM, "
             "exit (status 1) when it is lost; only the leader reconciles")] = False,
    leader_elect_resource_name: Annotated[str, typer.Option(help="the Lease's name")] = "sglang-operator",
    leader_elect_resource_namespace: Annotated[str | None, typer.Option(
        help="the Lease's namespace (default: $POD_NAMESPACE, the in-cluster namespace, else default)")] = None,
    leader_elect_lease_duration: Annotated[float, typer.Option(
        help="seconds a candidate waits on an unchanged Lease before taking it")] = 15.0,
    leader_elect_renew_deadline: Annotated[float, typer.Option(
        help="seconds the leader retries a renewal before giving up")] = 10.0,
    leader_elect_retry_period: Annotated[float, typer.Option(
        help="seconds between attempts to acquire or renew")] = 2.0,
    pod_monitors: Annotated[str, typer.Option(
        help="create a PodMonitor per SGLangServer: auto (when the monitoring.coreos.com/v1 API exists), "
             "always, never")] = "auto",
    pod_monitor_label: Annotated[list[str] | None, typer.Option(
        help="KEY=VALUE label put on every PodMonitor (repeatable), e.g. release=kube-prometheus-stack")] = None,
    prometheus_address: Annotated[str | None, typer.Option(
        help="Prometheus' URL a server's KEDA ScaledObject queries when spec.autoscaling.prometheus is unset, e.g. "
             "http://prometheus-operated.monitoring.svc:9090")] = None,
    allowed_prometheus_address: Annotated[list[str] | None, typer.Option(
        help="an address spec.autoscaling.prometheus.address may name besides --prometheus-address (repeatable; "
             "scheme://host[:port]; * allows any): KEDA's pod, with the cluster's network reach, queries it")] = None,
    allow_query_metric: Annotated[bool, typer.Option(
        help="allow spec.autoscaling.metric query (the user's PromQL on the shared Prometheus), each selector "
             "held to namespace=\"$namespace\"")] = False,
    metrics_port: Annotated[int, typer.Option(min=0, max=65535,
                                              help="port of the operator's own /metrics (0: off)")] = 9808,
    readiness_port: Annotated[int, typer.Option(
        min=0, max=65535, help="port serving /readyz alone (plain HTTP, for the kubelet), apart from the metrics "
                               "port's connection cap; 0: /readyz on the metrics port only")] = 0,
    metrics_read_timeout: Annotated[float, typer.Option(
        min=0.001, help="seconds a connection to the metrics port may take to send a complete request head, from "
                        "opening or from its previous answer; then it is closed")] = 10.0,
    metrics_write_timeout: Annotated[float, typer.Option(
        min=0.001, help="seconds to answer one request of the metrics port (token reviews included); then the "
                        "connection is aborted")] = 30.0,
    metrics_max_connections: Annotated[int, typer.Option(
        min=1, help="open connections to the metrics port at most; one more is answered 503 and closed")] = 128,
    metrics_secure: Annotated[bool, typer.Option(
        help="the metrics port speaks HTTPS only (TLS 1.2+) and /metrics needs a bearer token whose user may get "
             "the non-resource URL /metrics (TokenReview and SubjectAccessReview, as controller-runtime's secure "
             "metrics server); /readyz stays open, over the same TLS")] = False,
    metrics_cert_dir: Annotated[str | None, typer.Option(
        help="with --metrics-secure: the directory of the metrics port's certificate, tls.crt (PEM chain, serving "
             "certificate first) and tls.key (its unencrypted PEM key), e.g. a mounted kubernetes.io/tls Secret; "
             "read again when the files change (default: a self-signed certificate made at start)")] = None,
    sample_interval: Annotated[float | None, typer.Option(
        min=1.0, help="seconds between two samples of every server, replacing spec.rollback.intervalSeconds "
                      "(tests, demos; default: each server's own)")] = None,
    resync_seconds: Annotated[float, typer.Option(
        min=0.0, help="seconds between two full LISTs of SGLangServers and their pods, which forget what was "
                      "deleted during a watch gap (0: never)")] = 300.0,
    max_running_tunings: Annotated[int, typer.Option(
        min=1, help="SGLangTunings running at once, all namespaces together, at most one per SGLangServer; the "
                    "others wait (phase Pending, Running=False reason Queued), oldest first")] = 2,
    in_place_hold_max_seconds: Annotated[float, typer.Option(
        min=60.0, envvar="SGLANG_OPERATOR_IN_PLACE_HOLD_MAX_SECONDS",
        help="seconds an InPlace SGLangTuning may hold its server at most; an older hold is released (Warning "
             "event and TuningHeld=False reason HoldExpired), the stable revision applied again and the tuning "
             "cancelled")] = HOLD_MAX_SECONDS,
    max_tuning_duration_seconds: Annotated[float, typer.Option(
        min=60.0, envvar="SGLANG_OPERATOR_MAX_TUNING_DURATION_SECONDS",
        help="seconds an SGLangTuning may run at most, from its first trial, whatever its budget.maxDurationSeconds "
             "(up to 7 days): then it ends as that budget ends it (its best so far)")] = DURATION_CAP_SECONDS,
    scrape_body_limit: Annotated[int, typer.Option(
        min=1, help="bytes at most of one /metrics or /server_info body of an SGLang pod (Prometheus' "
                    "body_size_limit); a larger one is a scrape error too_large")] = sampling_limits.BODY_BYTES,
    scrape_sample_limit: Annotated[int, typer.Option(
        min=1, help="samples the sampler reads at most in one /metrics body (Prometheus' sample_limit, after "
                    "relabelling); more is a scrape error too_many_samples")] = sampling_limits.SAMPLES,
    scrape_label_limit: Annotated[int, typer.Option(
        min=1, help="labels at most of one sample the sampler reads (Prometheus' label_limit); more is a scrape "
                    "error too_many_labels")] = sampling_limits.LABELS,
    scrape_label_value_length_limit: Annotated[int, typer.Option(
        min=1, help="characters at most of one label value of a sample the sampler reads (Prometheus' "
                    "label_value_length_limit); longer is a scrape error label_value_too_long")]
        = sampling_limits.LABEL_VALUE_LENGTH,
    scrape_cache_bytes: Annotated[int, typer.Option(
        min=1, help="bytes of label sets remembered between scrapes, per pod")] = sampling_limits.CACHE_BYTES,
    scrape_retained_series: Annotated[int, typer.Option(
        min=1, help="series of one metric role a pod's scrape may have, as kept until the next interval; more is a "
                    "scrape error too_many_series")] = sampling_limits.RETAINED_SERIES,
    scrape_retained_bytes: Annotated[int, typer.Option(
        min=1, help="bytes of scrapes kept between intervals, all pods together; a pod that does not fit keeps "
                    "nothing (its next interval is inconclusive) and is counted")] = sampling_limits.RETAINED_BYTES,
    scrape_parse_workers: Annotated[int, typer.Option(
        min=0, help="processes that parse the sample lines of the /metrics scrapes off the event loop (0: on the "
                    "loop, which every server, the Lease and the watches share)")] = sampling_limits.PARSE_WORKERS,
    scrape_cpu_budget_seconds: Annotated[float, typer.Option(
        min=0.001, help="CPU seconds the parse of one server's scrapes may cost per interval, all its pods "
                        "together; a server over it is sampled less often (interval x 2^n, at most 60 s) and told "
                        "so in its condition SamplingBackedOff")] = sampling_limits.CPU_BUDGET_SECONDS,
    min_sample_interval: Annotated[float, typer.Option(
        min=1.0, help="the shortest sampling interval of any server, seconds, whatever spec.rollback.intervalSeconds "
                      "or --sample-interval say")] = sampling_limits.MIN_INTERVAL_SECONDS,
    probe_body_limit: Annotated[int, typer.Option(
        min=1, help="bytes at most of one probe answer; more fails the probe (probe_body_too_large)")]
        = sampling_limits.PROBE_BODY_BYTES,
    probe_line_limit: Annotated[int, typer.Option(
        min=1, help="bytes at most of one line of a probe answer; longer fails the probe (probe_line_too_long)")]
        = sampling_limits.PROBE_LINE_BYTES,
    probe_chunk_limit: Annotated[int, typer.Option(
        min=1, help="data: chunks at most of one probe answer; more fails the probe (probe_too_many_chunks)")]
        = sampling_limits.PROBE_CHUNKS,
    trial_streams: Annotated[int, typer.Option(
        min=1, help="streamed requests of tuning trials in flight at most, all trials together (the load runs in "
                    "the operator); a level waits until its concurrency is free, one over the cap fails its trial")]
        = TRIAL_STREAMS,
    trial_request_rate: Annotated[float, typer.Option(
        min=0.001, help="requests per second one tuning trial may start at most, all its streams together (a pod "
                        "answering at once is sent no more); a level whose streams this kept idle over 5 % of the "
                        "measured time fails its trial")] = TRIAL_REQUEST_RATE,
) -> None:
    """Run the operator (kopf) until SIGINT/SIGTERM."""
    from sglang_operator.io.discovery import PodMonitorMode, parse_labels
    from sglang_operator.process.metrics_http import MetricsServerConfig

    try:
        monitors = PodMonitorMode(pod_monitors)
        monitor_labels = parse_labels(pod_monitor_label or [])
    except ValueError as err:
        typer.echo(f"run: {err}", err=True)
        raise typer.Exit(2) from None
    election = _leader_election(leader_elect, leader_elect_resource_name, leader_elect_resource_namespace,
                                leader_elect_lease_duration, leader_elect_renew_deadline, leader_elect_retry_period)
    try:
        metrics_server = MetricsServerConfig(metrics_read_timeout, metrics_write_timeout, metrics_max_connections,
                                             metrics_secure, metrics_cert_dir)
    except ValueError as err:
        typer.echo(f"run: {err}", err=True)
        raise typer.Exit(2) from None
    try:
        runner = importlib.import_module("sglang_operator.entry.runner")
    except ModuleNotFoundError as err:
        typer.echo(f"run: the operator runtime is missing ({err})", err=True)
        raise typer.Exit(2) from None
    runner.run(leader_election=election, namespaces=namespace or (), liveness=liveness, peering=peering,
               verbose=verbose,
               pod_monitors=monitors, pod_monitor_labels=monitor_labels, prometheus_address=prometheus_address,
               allowed_prometheus_addresses=tuple(allowed_prometheus_address or ()),
               allow_query_metric=allow_query_metric,
               metrics_port=metrics_port, sample_interval=sample_interval, resync_seconds=resync_seconds,
               scrape_limits=sampling_limits.ScrapeLimits(scrape_body_limit, scrape_sample_limit, scrape_label_limit,
                                              scrape_label_value_length_limit, scrape_cache_bytes,
                                              scrape_retained_series, scrape_retained_bytes,
                                              cpu_budget_seconds=scrape_cpu_budget_seconds,
                                              parse_workers=scrape_parse_workers,
                                              min_interval_seconds=min_sample_interval),
               probe_limits=sampling_limits.ProbeLimits(probe_body_limit, probe_line_limit, probe_chunk_limit),
               metrics_server=metrics_server, readiness_port=readiness_port, trial_streams=trial_streams,
               trial_request_rate=trial_request_rate,
               max_running_tunings=max_running_tunings, in_place_hold_max_seconds=in_place_hold_max_seconds,
               max_tuning_duration_seconds=max_tuning_duration_seconds)


@app.command("prometheus-config")
def prometheus_config(
    namespace: Annotated[list[str] | None, typer.Option(
        "--namespace", "-n", help="discover SGLang pods only in this namespace (repeatable)")] = None,
    kubeconfig_file: Annotated[str | None, typer.Option(
        help="kubeconfig Prometheus reaches the API server with (default: in-cluster service account)")] = None,
    job_name: Annotated[str, typer.Option(help="scrape job name of the SGLang pods")] = "sglang",
    scrape_interval: Annotated[str | None, typer.Option(help="scrape interval, e.g. 15s (default: global)")] = None,
    operator_namespace: Annotated[list[str] | None, typer.Option(
        help="the namespace the operator runs in (repeatable; default: discover it in every namespace)")] = None,
    operator_job: Annotated[bool, typer.Option(
        help="also scrape the operator's own /metrics (the dashboard's decode speed, baseline, rollback and "
             "operator panels need it)")] = True,
    operator_job_name: Annotated[str, typer.Option(help="scrape job name of the operator")] = "sglang-operator",
    operator_secure: Annotated[bool, typer.Option(
        help="the operator runs with metrics.secure: HTTPS (not verified) and Prometheus' ServiceAccount token",
    )] = False,
) -> None:
    """Print a Prometheus configuration for a Prometheus without the Prometheus Operator: a job scraping every
    SGLangServer's pods like the operator's PodMonitors (Kubernetes pod discovery plus relabelling: labels namespace,
    pod, sglang_server, revision) and a job scraping the operator's own pods like the chart's ServiceMonitor
    (honor_labels: its series keep the SGLangServer's namespace). Merge its ``scrape_configs`` into your
    prometheus.yml."""
    from sglang_operator.builders.monitoring import prometheus_config as render_config

    doc = render_config(job_name=job_name, namespaces=tuple(namespace or ()), kubeconfig_file=kubeconfig_file,
                        interval=scrape_interval, operator_namespaces=tuple(operator_namespace or ()),
                        operator_job=operator_job, operator_job_name=operator_job_name,
                        operator_secure=operator_secure)
    typer.echo("# sglang-operator prometheus-config: SGLang pods, as the operator's PodMonitors scrape them"
               + ("; the operator, as the chart's ServiceMonitor does" if operator_job else ""))
    typer.echo(yaml.safe_dump(doc, sort_keys=False), nl=False)


def _add_ledger_commands() -> None:
    """``history``, ``diff``, ``retry``, ``promote``, ``undo`` and the ``tune`` group (also the kubectl plugin
    ``kubectl-sglang``)."""
    from sglang_operator.plugin.commands import app as ledger_app

    app.registered_commands.extend(ledger_app.registered_commands)
    app.registered_groups.extend(ledger_app.registered_groups)


_add_ledger_commands()


def _plain_help() -> None:
    """Every command's help as plain text (typer shows docstrings verbatim)."""
    for command in app.registered_commands:
        command.help = plain(command.help or inspect.getdoc(command.callback))


_plain_help()

if __name__ == "__main__":
    app()
