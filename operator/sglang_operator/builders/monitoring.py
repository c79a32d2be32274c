"""How Prometheus scrapes SGLang pods, defined once and rendered two ways (pure).

:data:`SCRAPE` says which port and path SGLang serves ``/metrics`` on (the container port ``http``: SGLang's
``--enable-metrics`` mounts ``/metrics`` on its HTTP port, ``python/sglang/srt/utils/common.py``
``add_prometheus_middleware``) and which target labels every SGLang series gets: ``namespace``, ``pod``,
``sglang_server`` (from the pod label ``app.kubernetes.io/instance``) and ``revision`` (from the pod label
``sglang-operator.io/revision``); a LeaderWorkerSet's pods also get ``worker_index`` (from LWS' pod label
``leaderworkerset.sigs.k8s.io/worker-index``: ``"0"`` on the leaders, the only ranks serving real ``/metrics``).
Prometheus' own ``instance`` (``IP:port``) is left untouched. A pod's series named like the operator's
(``sglang_operator_*``) are dropped (:data:`SCRAPE`'s ``metric_relabels``).

- :func:`pod_monitor`: a ``monitoring.coreos.com/v1`` PodMonitor for one SGLangServer (the Prometheus Operator
  selects the pods by label and the port by name; the relabelings add the labels).
- :func:`scrape_config`: the plain Prometheus ``scrape_configs`` entry (``kubernetes_sd_configs`` role ``pod``
  plus ``relabel_configs``) for users without the Prometheus Operator; the keep/drop rules do what the
  PodMonitor's selector, port and the Prometheus Operator's default phase filter do.

The operator's own ``/metrics`` (the chart's pods, container port ``metrics``): :func:`operator_scrape_config`, the
plain job standing for the chart's ServiceMonitor. Both keep the labels the operator's series carry
(``honor_labels``): those series name the SGLangServer they describe with ``namespace``, ``sglang_server`` and
``revision``, and the target's own ``namespace`` (the operator's) would otherwise replace it (Prometheus renames
the scraped one ``exported_namespace``).

Both take their port, path and labels from :data:`SCRAPE`, so they cannot drift apart
(``tests/builders/test_scrape_definition.py`` evaluates both on the same pod).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sglang_operator.builders.labels import (
    APP_NAME,
    COMPONENT_LABEL,
    INSTANCE_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NAME_LABEL,
    REVISION_LABEL,
    common_labels,
    selector_labels,
)
from sglang_operator.builders.leaderworkerset import LEADER_INDEX, WORKER_INDEX_LABEL
from sglang_operator.builders.workload import PORT_NAME

POD_MONITOR_API_VERSION = "monitoring.coreos.com/v1"
POD_MONITOR_KIND = "PodMonitor"
DEFAULT_JOB_NAME = "sglang"
FINISHED_POD_PHASES = "Succeeded|Failed"
"""Pods in these phases are not scraped (the Prometheus Operator's PodMonitor default, ``filterRunning``)."""


def meta_pod_label(label: str) -> str:
    """The Kubernetes service-discovery meta label of pod label ``label``: Prometheus replaces every character
    outside ``[a-zA-Z0-9_]`` by ``_`` (``app.kubernetes.io/instance`` →
    ``__meta_kubernetes_pod_label_app_kubernetes_io_instance``)."""
    return "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", label)


@dataclass(frozen=True)
class Relabel:
    """One relabelling step (Prometheus ``relabel_config``; PodMonitor ``RelabelConfig``).

    ``action`` ``replace``: ``target_label`` = ``replacement`` with ``regex`` matched against the
    ``;``-joined ``source_labels``; ``keep``/``drop``: keep/drop the target when ``regex`` matches.
    """

    source_labels: tuple[str, ...]
    action: str = "replace"
    target_label: str | None = None
    regex: str = "(.*)"
    replacement: str = "$1"

    def prometheus(self) -> dict[str, Any]:
        """As a Prometheus ``relabel_configs`` entry (snake_case)."""
        out: dict[str, Any] = {"source_labels": list(self.source_labels), "action": self.action, "regex": self.regex}
        if self.action == "replace":
            out |= {"target_label": self.target_label, "replacement": self.replacement}
        return out

    def pod_monitor(self) -> dict[str, Any]:
        """As a PodMonitor ``relabelings`` entry (camelCase, ``monitoring.coreos.com/v1`` RelabelConfig)."""
        out: dict[str, Any] = {"sourceLabels": list(self.source_labels), "action": self.action, "regex": self.regex}
        if self.action == "replace":
            out |= {"targetLabel": self.target_label, "replacement": self.replacement}
        return out


@dataclass(frozen=True)
class ScrapeEndpoint:
    """Where SGLang's metrics are (``port``: the container port name, ``path``) and the target labels
    (``labels``: relabelling steps shared by the PodMonitor and the plain scrape config)."""

    port: str
    path: str
    scheme: str
    labels: tuple[Relabel, ...]
    metric_relabels: tuple[Relabel, ...] = ()
    """Steps on each scraped series (Prometheus ``metric_relabel_configs``; PodMonitor ``metricRelabelings``)."""


OPERATOR_SERIES_PREFIX = "sglang_operator_"
"""The name prefix of the operator's own series (:mod:`sglang_operator.process.telemetry`)."""


SCRAPE = ScrapeEndpoint(
    port=PORT_NAME,
    path="/metrics",
    scheme="http",
    labels=(
        Relabel(("__meta_kubernetes_namespace",), target_label="namespace"),
        Relabel(("__meta_kubernetes_pod_name",), target_label="pod"),
        Relabel((meta_pod_label(INSTANCE_LABEL),), target_label="sglang_server"),
        Relabel((meta_pod_label(REVISION_LABEL),), target_label="revision"),
        Relabel((meta_pod_label(WORKER_INDEX_LABEL),), target_label="worker_index"),
    ),
    metric_relabels=(Relabel(("__name__",), action="drop", regex=f"{OPERATOR_SERIES_PREFIX}.*"),),
)
"""The one definition of how SGLang pods are scraped. A pod's series named like the operator's own
(``sglang_operator_*``) are dropped: autoscaling's built-in queries read the operator's series of a server
(:mod:`sglang_operator.builders.autoscaling`), and a hand-made pod carrying the server's labels, scraped by this job,
would otherwise feed them under the server's ``namespace``, ``sglang_server`` and ``revision``."""

WORKER_INDEX_TARGET = "worker_index"
"""The target label of a LeaderWorkerSet pod's worker index (absent on a Deployment's pods: Prometheus drops a label
whose relabelled value is empty)."""
LEADERS_ONLY = f'{WORKER_INDEX_TARGET}="{LEADER_INDEX}"'
"""The PromQL label matcher keeping a multi-node server's leaders (rank 0 of each group)."""
TARGET_LABELS = tuple(r.target_label for r in SCRAPE.labels if r.target_label and r.target_label != WORKER_INDEX_TARGET)
"""``("namespace", "pod", "sglang_server", "revision")``: the labels every scraped SGLang series carries."""


def managed_pod_labels(name: str) -> dict[str, str]:
    """The labels the pods of SGLangServer ``name`` carry and a PodMonitor selects them by."""
    return {**selector_labels(name), MANAGED_BY_LABEL: MANAGED_BY}


def pod_monitor(name: str, namespace: str, sglang_version: str, labels: Mapping[str, str] | None = None,
                interval: str | None = None) -> dict[str, Any]:
    """The PodMonitor of SGLangServer ``name`` (no ownerReferences: the caller adopts it).

    ``labels``: extra metadata labels (e.g. ``release: prometheus`` for a Prometheus' ``podMonitorSelector``).
    ``interval``: scrape interval as a Prometheus duration (``15s``); None uses the Prometheus' default.
    Shape: ``monitoring.coreos.com/v1`` PodMonitor with one ``podMetricsEndpoints`` entry.
    """
    endpoint: dict[str, Any] = {"port": SCRAPE.port, "path": SCRAPE.path, "scheme": SCRAPE.scheme,
                                "relabelings": [r.pod_monitor() for r in SCRAPE.labels],
                                "metricRelabelings": [r.pod_monitor() for r in SCRAPE.metric_relabels]}
    if interval:
        endpoint["interval"] = interval
    return {
        "apiVersion": POD_MONITOR_API_VERSION,
        "kind": POD_MONITOR_KIND,
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {**(labels or {}), **common_labels(name, sglang_version)}},
        "spec": {
            "selector": {"matchLabels": managed_pod_labels(name)},
            "podMetricsEndpoints": [endpoint],
        },
    }


TRIAL_COMPONENT = "tuning-trial"
"""``app.kubernetes.io/component`` of an SGLangTuning's Shadow trial pods
(:data:`sglang_operator.builders.tuning.TRIAL_COMPONENT`): never scraped, so a trial never appears as a server in
the dashboards (the tuning measures its trials itself)."""


def discovery_filters() -> tuple[Relabel, ...]:
    """The keep/drop steps of the plain config that stand for the PodMonitor's selector, port and phase filter:
    pods labelled as the operator's SGLang pods, but not a tuning's trial pods (a server's PodMonitor selects its
    own instance only), their container port ``http``, not finished."""
    return (
        Relabel((meta_pod_label(NAME_LABEL), meta_pod_label(MANAGED_BY_LABEL)), action="keep",
                regex=f"{APP_NAME};{MANAGED_BY}"),
        Relabel((meta_pod_label(COMPONENT_LABEL),), action="drop", regex=TRIAL_COMPONENT),
        Relabel(("__meta_kubernetes_pod_container_port_name",), action="keep", regex=SCRAPE.port),
        Relabel(("__meta_kubernetes_pod_phase",), action="drop", regex=FINISHED_POD_PHASES),
    )


def scrape_config(job_name: str = DEFAULT_JOB_NAME, namespaces: tuple[str, ...] = (),
                  kubeconfig_file: str | None = None, interval: str | None = None) -> dict[str, Any]:
    """The plain Prometheus ``scrape_configs`` entry equivalent to the PodMonitors.

    ``namespaces``: restrict pod discovery (empty: every namespace). ``kubeconfig_file``: reach the API server
    with a kubeconfig instead of the in-cluster service account (Prometheus' ``kubernetes_sd_configs``).
    ``interval``: ``scrape_interval`` (Prometheus duration); None keeps the global one.
    """
    job: dict[str, Any] = {"job_name": job_name, "metrics_path": SCRAPE.path, "scheme": SCRAPE.scheme}
    job = _pod_job(job, f"{MANAGED_BY_LABEL}={MANAGED_BY}", namespaces, kubeconfig_file, interval,
                   (*discovery_filters(), *SCRAPE.labels))
    job["metric_relabel_configs"] = [r.prometheus() for r in SCRAPE.metric_relabels]
    return job


def _pod_job(job: dict[str, Any], label: str, namespaces: tuple[str, ...], kubeconfig_file: str | None,
             interval: str | None, relabels: tuple[Relabel, ...]) -> dict[str, Any]:
    """``job`` (a ``scrape_configs`` entry) completed: ``scrape_interval`` (``interval``, when set), discovery of the
    pods labelled ``label`` (``key=value``) in ``namespaces`` (empty: all; through ``kubeconfig_file`` when set),
    and the ``relabels`` steps."""
    sd: dict[str, Any] = {"role": "pod", "selectors": [{"role": "pod", "label": label}]}
    if namespaces:
        sd["namespaces"] = {"names": list(namespaces)}
    if kubeconfig_file:
        sd["kubeconfig_file"] = kubeconfig_file
    if interval:
        job["scrape_interval"] = interval
    job["kubernetes_sd_configs"] = [sd]
    job["relabel_configs"] = [r.prometheus() for r in relabels]
    return job


OPERATOR_APP_NAME = "sglang-operator"
"""The chart's pod label ``app.kubernetes.io/name`` (``charts/sglang-operator``: ``.Chart.Name``, selectorLabels)."""
OPERATOR_PORT_NAME = "metrics"
"""The chart's container port of the operator's ``/metrics`` (``--metrics-port``)."""
DEFAULT_OPERATOR_JOB_NAME = "sglang-operator"
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def operator_scrape_config(job_name: str = DEFAULT_OPERATOR_JOB_NAME, namespaces: tuple[str, ...] = (),
                           kubeconfig_file: str | None = None, interval: str | None = None,
                           secure: bool = False) -> dict[str, Any]:
    """The plain Prometheus ``scrape_configs`` entry for the operator's own ``/metrics``, as the chart's ServiceMonitor
    scrapes it: pods labelled ``app.kubernetes.io/name=sglang-operator``, their container port ``metrics``, not
    finished; target labels ``namespace`` and ``pod`` (the operator's pod); ``honor_labels``, so the operator's
    series keep their own ``namespace`` (the SGLangServer's).

    ``namespaces``: where the operator runs (empty: discover every namespace). ``kubeconfig_file``, ``interval``: as
    :func:`scrape_config`. ``secure``: the chart's ``metrics.secure`` (HTTPS, the certificate not verified, the
    Prometheus' own ServiceAccount token as the bearer; bind it to the chart's metrics-reader ClusterRole).
    """
    job: dict[str, Any] = {"job_name": job_name, "honor_labels": True, "metrics_path": "/metrics",
                           "scheme": "https" if secure else "http"}
    if secure:
        job |= {"tls_config": {"insecure_skip_verify": True},
                "authorization": {"type": "Bearer", "credentials_file": SERVICE_ACCOUNT_TOKEN}}
    return _pod_job(job, f"{NAME_LABEL}={OPERATOR_APP_NAME}", namespaces, kubeconfig_file, interval, (
        Relabel((meta_pod_label(NAME_LABEL),), action="keep", regex=OPERATOR_APP_NAME),
        Relabel(("__meta_kubernetes_pod_container_port_name",), action="keep", regex=OPERATOR_PORT_NAME),
        Relabel(("__meta_kubernetes_pod_phase",), action="drop", regex=FINISHED_POD_PHASES),
        Relabel(("__meta_kubernetes_namespace",), target_label="namespace"),
        Relabel(("__meta_kubernetes_pod_name",), target_label="pod"),
    ))


def prometheus_config(operator_namespaces: tuple[str, ...] = (), operator_job: bool = True,
                      operator_job_name: str = DEFAULT_OPERATOR_JOB_NAME, operator_secure: bool = False,
                      **kwargs: Any) -> dict[str, Any]:
    """A Prometheus configuration file (``{"scrape_configs": [...]}``): :func:`scrape_config` (SGLang's pods) and,
    unless not ``operator_job``, :func:`operator_scrape_config` (the operator itself, in ``operator_namespaces``;
    empty: every namespace). ``kubeconfig_file`` and ``interval`` apply to both; the other keyword arguments as
    :func:`scrape_config`."""
    jobs = [scrape_config(**kwargs)]
    if operator_job:
        jobs.append(operator_scrape_config(operator_job_name, operator_namespaces, kwargs.get("kubeconfig_file"),
                                           kwargs.get("interval"), operator_secure))
    return {"scrape_configs": jobs}
