"""The real Prometheus Operator for tests: its controller (``python -m e2e.tools prometheus-operator``) run against
the local API server, and the Prometheus configuration it generates for a ``Prometheus`` object, made runnable by
the locally built Prometheus 3 outside a pod.

What the Prometheus Operator writes for ``Prometheus`` ``<ns>/<name>`` (v0.85.0): the Secret ``prometheus-<name>``
(key ``prometheus.yaml.gz``: the gzipped configuration, one scrape job per ServiceMonitor / PodMonitor endpoint),
the ConfigMaps ``prometheus-<name>-rulefiles-<n>`` (one file per PrometheusRule) and a StatefulSet whose pods
mount them. The fake kubelet cannot run those pods (they need the mounts at absolute paths), so
:func:`runnable_config` does here what the pod would do, and nothing more:

- the config reloader's substitution of ``$(VAR)`` references (``$(POD_NAME)`` in the external labels, ``$(SHARD)``
  in every job's sharding rule) from the StatefulSet's config-reloader container environment; a reference to a
  variable it does not set is an error, as for the reloader;
- the rule files at their mount, ``/etc/prometheus/rules/``, read from a local directory instead
  (:func:`write_rule_files` copies the ConfigMaps there);
- ``kubeconfig_file`` in every ``kubernetes_sd_configs`` entry (the pod would use its ServiceAccount).

The scrape jobs, their relabelling and ``honor_labels`` stay as the Prometheus Operator wrote them.

Services get no endpoints on the local cluster (loopback pod IPs are refused as endpoint addresses), so a
ServiceMonitor's ``endpoints`` discovery finds nothing here: :func:`endpoints_target` builds the labels Prometheus'
endpoints discovery would give one pod port behind a Service (``discovery/kubernetes/endpoints.go`` of Prometheus
v0.316.0) and :func:`with_static_targets` puts such targets in place of the job's discovery, keeping its
``relabel_configs``. :func:`pod_target` does the same for ``pod`` discovery of a process that runs on the test host
instead of in its pod (the operator; ``sglang-operator prometheus-config``'s job for it).
"""

from __future__ import annotations

import base64
import gzip
import os
import re
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from e2e import background
from e2e.cluster.procs import free_port
from e2e.conftest import K8sCluster, wait_for

RULES_MOUNT = "/etc/prometheus/rules/"
"""Where the Prometheus Operator's StatefulSet mounts the rule ConfigMaps (``rule_files`` point under it)."""
RELOADER_CONTAINER = "config-reloader"
_ENV_REF = re.compile(r"\$\(([a-zA-Z_0-9]+)\)")  # the config reloader's (Thanos pkg/reloader) substitution


class PrometheusOperatorProcess:
    """The Prometheus Operator's controller (``binary``) against the cluster of ``kubeconfig`` (``KUBECONFIG``; the
    binary has no kubeconfig flag), its web endpoint on a free loopback port, its log in ``log_path``."""

    def __init__(self, binary: Path, kubeconfig: Path, log_path: Path, namespaces: tuple[str, ...] = ()) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.namespaces = namespaces
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> None:
        """Start it and wait for its ``/healthz``. Raises RuntimeError with the log's tail when it exits or does not
        answer within ``timeout`` seconds."""
        self.port = free_port()
        argv = [str(self.binary), f"--web.listen-address=127.0.0.1:{self.port}", "--log-level=info"]
        if self.namespaces:
            argv.append(f"--namespaces={','.join(self.namespaces)}")
        self.proc = background.spawn(argv, self.log_path, {**os.environ, "KUBECONFIG": str(self.kubeconfig)})
        background.wait_serving(self.proc, lambda: background.answers_ok(f"http://127.0.0.1:{self.port}/healthz"),
                                "prometheus-operator", "healthy", self.log_tail, timeout)

    def stop(self, timeout: float = 15) -> None:
        background.stop_group(self.proc, signal.SIGTERM, timeout)

    def log_tail(self, lines: int = 30) -> str:
        return background.log_tail(self.log_path, lines)


def generated_config(k8s: K8sCluster, namespace: str, name: str,
                     wanted: Any = lambda config: True, timeout: float = 60) -> dict[str, Any]:
    """The configuration the Prometheus Operator generated for ``Prometheus`` ``namespace/name`` (its Secret
    ``prometheus-<name>``, ``prometheus.yaml.gz``), once ``wanted(config)`` holds (e.g. every job is there)."""
    def read() -> dict[str, Any] | None:
        got = k8s.run("get", "secret", f"prometheus-{name}", "-n", namespace, "-o",
                      "jsonpath={.data.prometheus\\.yaml\\.gz}", check=False)
        if got.returncode != 0 or not got.stdout.strip():
            return None
        config: dict[str, Any] = yaml.safe_load(gzip.decompress(base64.b64decode(got.stdout)))
        return config if wanted(config) else None
    return wait_for(f"the Prometheus Operator's configuration of {namespace}/{name}", read, timeout=timeout)


def reloader_env(k8s: K8sCluster, namespace: str, name: str, replica: int = 0) -> dict[str, str]:
    """The environment the config reloader of pod ``replica`` of ``Prometheus`` ``namespace/name`` substitutes from:
    its container's ``env`` in the generated StatefulSet (``value``s, and ``metadata.name`` field references as the
    pod's name, ``prometheus-<name>-<replica>``)."""
    sts = k8s.get("statefulset", f"prometheus-{name}", "-n", namespace)
    pod = f"{sts['metadata']['name']}-{replica}"
    [container] = [c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == RELOADER_CONTAINER]
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        elif var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[var["name"]] = pod
    return env


def write_rule_files(k8s: K8sCluster, namespace: str, name: str, directory: Path) -> list[Path]:
    """Copy the rule ConfigMaps ``prometheus-<name>-rulefiles-<n>`` into ``directory/<configmap>/`` (their mount
    layout under :data:`RULES_MOUNT`); return the files written."""
    written = []
    for cm in k8s.get("configmaps", "-n", namespace)["items"]:
        cm_name = cm["metadata"]["name"]
        if not cm_name.startswith(f"prometheus-{name}-rulefiles-"):
            continue
        (directory / cm_name).mkdir(parents=True, exist_ok=True)
        for key, text in (cm.get("data") or {}).items():
            (directory / cm_name / key).write_text(text)
            written.append(directory / cm_name / key)
    return written


def substitute(text: str, env: Mapping[str, str]) -> str:
    """``$(VAR)`` references replaced from ``env``, as the config reloader does. Raises KeyError naming a variable
    ``env`` does not set."""
    def one(m: re.Match[str]) -> str:
        if m.group(1) not in env:
            raise KeyError(f"the configuration references $({m.group(1)}), which the config reloader does not set")
        return env[m.group(1)]
    return _ENV_REF.sub(one, text)


def runnable_config(config: dict[str, Any], env: Mapping[str, str], kubeconfig: Path,
                    rules_dir: Path) -> dict[str, Any]:
    """``config`` (the Prometheus Operator's) as the locally built Prometheus runs it outside a pod: ``$(VAR)``
    substituted from ``env`` (:func:`reloader_env`), ``rule_files`` under ``rules_dir`` instead of
    :data:`RULES_MOUNT`, ``kubeconfig_file`` in every ``kubernetes_sd_configs`` entry. Nothing else changes."""
    out: dict[str, Any] = yaml.safe_load(substitute(yaml.safe_dump(config, sort_keys=False), env))
    out["rule_files"] = [str(rules_dir / f.removeprefix(RULES_MOUNT)) if f.startswith(RULES_MOUNT) else f
                         for f in out.get("rule_files", [])]
    for job in out.get("scrape_configs", []):
        for sd in job.get("kubernetes_sd_configs", []):
            sd["kubeconfig_file"] = str(kubeconfig)
    return out


def _sanitize(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _object_meta(role: str, meta: Mapping[str, Any]) -> dict[str, str]:
    """``__meta_kubernetes_<role>_name``, ``_label_*``, ``_labelpresent_*``, ``_annotation_*``,
    ``_annotationpresent_*`` (Prometheus ``addObjectMetaLabels``)."""
    prefix = f"__meta_kubernetes_{role}"
    out = {f"{prefix}_name": str(meta["name"])}
    for kind, items in (("label", meta.get("labels") or {}), ("annotation", meta.get("annotations") or {})):
        for k, v in items.items():
            out[f"{prefix}_{kind}_{_sanitize(k)}"] = str(v)
            out[f"{prefix}_{kind}present_{_sanitize(k)}"] = "true"
    return out


def _pod_labels(pod: Mapping[str, Any], address: str) -> dict[str, str]:
    """The pod's own labels in Kubernetes discovery (Prometheus ``podLabels``): name, IP (``address``' host: where
    the process really listens here), Ready and Running, node, host IP, UID, labels, annotations, controller."""
    meta = pod["metadata"]
    host = address.rsplit(":", 1)[0]
    out = {"__meta_kubernetes_pod_ready": "true", "__meta_kubernetes_pod_phase": "Running",
           "__meta_kubernetes_pod_ip": host, "__meta_kubernetes_pod_node_name": str(pod["spec"].get("nodeName", "")),
           "__meta_kubernetes_pod_host_ip": str((pod.get("status") or {}).get("hostIP", host)),
           "__meta_kubernetes_pod_uid": str(meta.get("uid", ""))}
    out |= _object_meta("pod", meta)
    for owner in meta.get("ownerReferences") or []:
        if owner.get("controller"):
            out |= {"__meta_kubernetes_pod_controller_kind": str(owner["kind"]),
                    "__meta_kubernetes_pod_controller_name": str(owner["name"])}
    return out


def _container_port(pod: Mapping[str, Any], port: str | int) -> dict[str, str]:
    """The container port labels of the first container port named or numbered ``port`` (init containers last)."""
    containers = [*pod["spec"]["containers"], *pod["spec"].get("initContainers", [])]
    for i, c in enumerate(containers):
        cport = next((p for p in c.get("ports", []) if port in (p.get("name"), p["containerPort"])), None)
        if cport is not None:
            return {"__meta_kubernetes_pod_container_name": str(c["name"]),
                    "__meta_kubernetes_pod_container_image": str(c.get("image", "")),
                    "__meta_kubernetes_pod_container_port_name": str(cport.get("name", "")),
                    "__meta_kubernetes_pod_container_port_number": str(cport["containerPort"]),
                    "__meta_kubernetes_pod_container_port_protocol": str(cport.get("protocol", "TCP")),
                    "__meta_kubernetes_pod_container_init": str(i >= len(pod["spec"]["containers"])).lower()}
    raise KeyError(f"pod {pod['metadata'].get('name')} has no container port {port!r}")


def pod_target(pod: Mapping[str, Any], port_name: str, address: str) -> dict[str, str]:
    """The labels Prometheus' ``pod`` discovery gives the container port ``port_name`` of ``pod`` (Ready, Running),
    with ``__address__`` = ``address``."""
    return {"__address__": address, "__meta_kubernetes_namespace": str(pod["metadata"]["namespace"]),
            **_pod_labels(pod, address), **_container_port(pod, port_name)}


def endpoints_target(service: Mapping[str, Any], pod: Mapping[str, Any], port_name: str,
                     address: str) -> dict[str, str]:
    """The labels Prometheus' ``endpoints`` discovery gives the port ``port_name`` of ``pod`` behind ``service``
    (both objects as the API server returns them; the Endpoints object the endpoints controller would make carries
    the Service's name and labels), with ``__address__`` = ``address`` (``host:port``: where the process really
    listens here). The pod is Ready and Running, as one the endpoints list as ready."""
    [port] = [p for p in service["spec"]["ports"] if p.get("name") == port_name]
    endpoints_meta = {"name": service["metadata"]["name"], "labels": service["metadata"].get("labels") or {}}
    labels = {"__address__": address, "__meta_kubernetes_namespace": str(service["metadata"]["namespace"]),
              "__meta_kubernetes_endpoint_port_name": port_name,
              "__meta_kubernetes_endpoint_port_protocol": str(port.get("protocol", "TCP")),
              "__meta_kubernetes_endpoint_ready": "true",
              "__meta_kubernetes_endpoint_address_target_kind": "Pod",
              "__meta_kubernetes_endpoint_address_target_name": str(pod["metadata"]["name"])}
    if pod["spec"].get("nodeName"):
        labels["__meta_kubernetes_endpoint_node_name"] = str(pod["spec"]["nodeName"])
    labels |= _object_meta("endpoints", endpoints_meta) | _object_meta("service", service["metadata"])
    labels |= _pod_labels(pod, address) | _container_port(pod, port.get("targetPort", port["port"]))
    return labels


def with_static_targets(job: dict[str, Any], targets: list[dict[str, str]]) -> dict[str, Any]:
    """``job`` with its Kubernetes discovery replaced by ``targets`` (label sets with ``__address__``, e.g. from
    :func:`endpoints_target`) as ``static_configs``; its relabelling, scheme, path and ``honor_labels`` unchanged."""
    out = {k: v for k, v in job.items() if k != "kubernetes_sd_configs"}
    out["static_configs"] = [{"targets": [t["__address__"]],
                              "labels": {k: v for k, v in t.items() if k != "__address__"}} for t in targets]
    return out
