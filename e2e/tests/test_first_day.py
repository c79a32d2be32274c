"""Issue 11, "first day with the operator", against the real API server and the operator: each bullet of the
issue's "Why" reproduced and now answered.

- a crash-looping server (``memFractionStatic: 0.2``) shows SGLang's exception, not its server-args dump;
- typos in pass-through pod fields are refused by the API server naming the field; a child the API server
  refuses is SpecValid=False with its message and a Warning event, once (no silent retry loop);
- EAGLE3 without a draft model is refused;
- refusals name the field, the flag and the values (owned flags, GPU numbers, ``:latest``, SGLang's own rules);
- the recommended sample gets no Warning event; the maxRunningRequests warning says what SGLang really does;
- a scale-up is Available while not Ready, events have one source, logs carry no per-request lines;
- RollingUpdate keeps a replica serving; a Recreate drains in-flight requests first.

(The CLI bullets are tests/entry/test_cli.py; the chart's permission table is tests/chart/test_chart.py.)
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import K8sCluster, running_operator, wait_for
from e2e.operator_proc import OperatorProcess
from e2e.tests.test_operator import columns, cond, ready_pods, sample, sgls, wait_ready
from sglang_operator.builders.workload import DEFAULT_SECURITY_CONTEXT
from sglang_operator.io.loadgen import LoadResult, probe

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
ROOT = Path(__file__).resolve().parents[2]
NAME = "qwen36-27b"
CAUSE = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static"


@pytest.fixture(scope="module")
def operator(k8s_cluster: K8sCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with running_operator(k8s_cluster, tmp_path_factory.mktemp("operator")) as op:
        yield op


def events(k8s: K8sCluster, ns: str, name: str = NAME) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = k8s.get("events", "-n", ns, "--field-selector",
                                          f"involvedObject.name={name},involvedObject.kind=SGLangServer")["items"]
    return items


def event(k8s: K8sCluster, ns: str, reason: str, contains: str = "", timeout: float = 30) -> dict[str, Any]:
    found: dict[str, Any] = wait_for(f"event {reason} ({contains})", lambda: next(
        (e for e in events(k8s, ns) if e["reason"] == reason and contains in e.get("message", "")), None),
        timeout=timeout)
    return found


def refused(k8s: K8sCluster, ns: str, body: dict[str, Any]) -> str:
    """``kubectl apply`` of ``body`` (not a dry run): must fail; the API server's message."""
    proc = k8s.run("apply", "-n", ns, "-f", "-", input=json.dumps(body), check=False)
    assert proc.returncode != 0, f"the API server accepted it: {proc.stdout}"
    assert k8s.run("get", "sglangserver", NAME, "-n", ns, check=False).returncode != 0  # nothing stored
    return proc.stderr


def spec_valid_false(k8s: K8sCluster, ns: str) -> dict[str, Any]:
    found: dict[str, Any] = wait_for("SpecValid=False", lambda: (c := cond(sgls(k8s, ns, NAME), "SpecValid"))
                                     .get("status") == "False" and c, timeout=30)
    return found


def test_crash_loop_shows_sglangs_exception(k8s_cluster: K8sCluster, namespace: str,
                                            operator: OperatorProcess) -> None:
    body = sample()
    body["spec"]["memory"]["memFractionStatic"] = 0.2  # too little for the weights: SGLang dies at start-up
    k8s_cluster.apply(body, namespace)
    degraded = wait_for("Degraded with the exception", lambda: (c := cond(sgls(k8s_cluster, namespace, NAME),
                                                                          "Degraded"))
                        .get("status") == "True" and CAUSE in c.get("message", "") and c, timeout=90)
    assert degraded["reason"] in ("CrashLoopBackOff", "Error")
    assert len(degraded["message"]) <= 1024
    assert degraded["message"].startswith("container sglang exited with code 1")
    assert "server_args=ServerArgs(" not in degraded["message"][:200]  # the dump no longer hides the cause
    ev = event(k8s_cluster, namespace, degraded["reason"], CAUSE)
    assert ev["type"] == "Warning"


def test_pass_through_typos_are_refused_by_the_api_server(k8s_cluster: K8sCluster, namespace: str,
                                                          operator: OperatorProcess) -> None:
    body = sample()
    body["spec"]["securityContext"] = {"runAsUsr": 1000}
    assert 'unknown field "spec.securityContext.runAsUsr"' in refused(k8s_cluster, namespace, body)
    body = sample()
    body["spec"]["affinity"] = {"nodeAfinity": {}}
    assert 'unknown field "spec.affinity.nodeAfinity"' in refused(k8s_cluster, namespace, body)
    body = sample()
    body["spec"]["securityContext"] = {"runAsUser": 1000}  # the right spelling goes through to the container,
    k8s_cluster.apply(body, namespace)
    dep = wait_for("the Deployment", lambda: k8s_cluster.get("deployments", "-n", namespace)["items"], timeout=30)
    assert dep[0]["spec"]["template"]["spec"]["containers"][0]["securityContext"] == {  # over the defaults
        **DEFAULT_SECURITY_CONTEXT, "runAsUser": 1000}


def test_a_child_the_api_server_refuses_is_reported_once(k8s_cluster: K8sCluster, namespace: str,
                                                         operator: OperatorProcess) -> None:
    body = sample()
    body["spec"]["volumeMounts"] = [{"name": "no-such-volume", "mountPath": "/data"}]  # valid for the CRD
    k8s_cluster.apply(body, namespace)
    valid = spec_valid_false(k8s_cluster, namespace)
    assert "the API server refused the Deployment (HTTP 422)" in valid["message"]
    assert '.name: Not found: "no-such-volume"' in valid["message"]  # the API server's own words
    event(k8s_cluster, namespace, "InvalidSpec", "no-such-volume")
    time.sleep(5)  # a retry loop would post again (kopf retries failed handlers)
    assert len([e for e in events(k8s_cluster, namespace) if e["reason"] == "InvalidSpec"]) == 1
    assert k8s_cluster.get("deployments", "-n", namespace)["items"] == []  # nothing half-applied
    assert operator.log_text().count("no-such-volume") <= 2


def test_an_apply_the_cluster_forbids_is_degraded_and_retried(k8s_cluster: K8sCluster, namespace: str,
                                                             operator: OperatorProcess) -> None:
    """Not the spec's fault (a cluster policy answers 403): Degraded=True ApplyFailed with the API server's
    message and one Warning event, retried by kopf until the policy is gone; then the server runs."""
    policy = f"freeze-{namespace}"[:63]
    vap = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
           "metadata": {"name": policy},
           "spec": {"failurePolicy": "Fail",
                    "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                                            "operations": ["CREATE", "UPDATE"],
                                                            "resources": ["deployments"]}]},
                    "validations": [{"expression": "false", "reason": "Forbidden",
                                     "message": "deployments are frozen in this namespace"}]}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": policy},
               "spec": {"policyName": policy, "validationActions": ["Deny"],
                        "matchResources": {"namespaceSelector": {"matchLabels": {
                            "kubernetes.io/metadata.name": namespace}}}}}
    k8s_cluster.apply(vap)
    k8s_cluster.apply(binding)
    try:
        probe_dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "probe"},
                     "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
                         "metadata": {"labels": {"a": "b"}},
                         "spec": {"containers": [{"name": "c", "image": "example.com/http-echo:1.0"}]}}}}
        wait_for("the policy in force", lambda: "frozen" in k8s_cluster.run(
            "apply", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(probe_dep),
            check=False).stderr, timeout=30)
        k8s_cluster.apply(sample(), namespace)
        degraded = wait_for("Degraded ApplyFailed", lambda: (c := cond(sgls(k8s_cluster, namespace, NAME),
                                                                       "Degraded")).get("reason") == "ApplyFailed"
                            and c, timeout=30)
        assert degraded["status"] == "True"
        assert degraded["message"].startswith("applying the Deployment failed (HTTP 403): ")
        assert "deployments are frozen in this namespace" in degraded["message"]
        event(k8s_cluster, namespace, "ApplyFailed", "frozen")
        time.sleep(35)  # kopf retried once meanwhile (delay 30 s): same failure, no second event
        assert len([e for e in events(k8s_cluster, namespace) if e["reason"] == "ApplyFailed"]) == 1
        assert operator.log_text().count("deployments are frozen") >= 2  # retried, and said so in the log
    finally:
        k8s_cluster.run("delete", "validatingadmissionpolicybinding", policy, "--ignore-not-found", check=False)
        k8s_cluster.run("delete", "validatingadmissionpolicy", policy, "--ignore-not-found", check=False)
    wait_ready(k8s_cluster, namespace, NAME, timeout=90)  # the next retry applies it


def test_eagle3_without_a_draft_model_is_refused(k8s_cluster: K8sCluster, namespace: str,
                                                 operator: OperatorProcess) -> None:
    body = sample()
    body["spec"]["speculative"]["algorithm"] = "EAGLE3"
    err = refused(k8s_cluster, namespace, body)
    assert "spec.speculative.draftModelPath is required with algorithm EAGLE3" in err


def test_refusals_name_field_flag_and_values(k8s_cluster: K8sCluster, namespace: str,
                                             operator: OperatorProcess) -> None:
    body = sample()
    body["spec"]["extraArgs"] = ["--tp-size", "4"]
    err = refused(k8s_cluster, namespace, body)
    assert "spec.extraArgs: --tp-size is rendered from spec.parallelism.tensor" in err
    body = sample()
    body["spec"]["extraArgs"] = ["--mem-frac", "0.5"]
    assert "spec.extraArgs: --mem-frac is rendered from spec.memory.memFractionStatic" in \
        refused(k8s_cluster, namespace, body)
    body = sample()
    body["spec"]["parallelism"]["tensor"] = 4
    body["spec"]["resources"] = {"gpu": 2}
    err = refused(k8s_cluster, namespace, body)
    assert "spec.resources.gpu is 2 but" in err and "= 4: set spec.resources.gpu to at least 4" in err
    # beyond the schema: the operator's SpecValid names the field to set
    body = sample()
    body["spec"]["sglang"]["image"] = "lmsysorg/sglang:latest"
    k8s_cluster.apply(body, namespace)
    assert "set spec.sglang.version" in spec_valid_false(k8s_cluster, namespace)["message"]
    # SGLang's own rule, said in the spec's terms with SGLang's text after it
    body = sample()
    body["spec"]["memory"]["mambaSchedulerStrategy"] = "no_buffer"
    k8s_cluster.apply(body, namespace)
    msg = wait_for("SGLang's refusal", lambda: (m := cond(sgls(k8s_cluster, namespace, NAME), "SpecValid")
                                               .get("message", "")) and "no_buffer" in m and m, timeout=30)
    assert "spec.memory.mambaSchedulerStrategy=no_buffer" in msg
    assert "SGLang 0.5.10 refuses the command line: ValueError: Speculative decoding for" in msg


def test_known_good_sample_gets_no_warning_and_the_limit_warning_is_honest(
        k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess) -> None:
    k8s_cluster.apply(sample(), namespace)
    obj = wait_ready(k8s_cluster, namespace, NAME)
    assert cond(obj, "SpecValid")["reason"] == "Valid"
    event(k8s_cluster, namespace, "Created")
    assert [e for e in events(k8s_cluster, namespace) if e["type"] == "Warning"] == []
    # without maxRunningRequests SGLang picks its own limit: the warning says so, and where to read it
    rev = obj["status"]["revision"]
    k8s_cluster.run("patch", "sglangserver", NAME, "-n", namespace, "--type=json", "-p",
                    json.dumps([{"op": "remove", "path": "/spec/memory/maxRunningRequests"}]))
    obj = wait_for("a new revision", lambda: (o := sgls(k8s_cluster, namespace, NAME))["status"]
                   .get("revision") not in (None, rev) and o, timeout=30)
    obj = wait_ready(k8s_cluster, namespace, NAME, obj["status"]["revision"])
    valid = cond(obj, "SpecValid")
    assert valid["reason"] == "ValidWithWarnings"
    assert "SGLang picks its own limit" in valid["message"]
    assert "status.effective.maxRunningRequests" in valid["message"] and "silently uses 48" not in valid["message"]
    assert 1 <= obj["status"]["effective"]["maxRunningRequests"] <= 48
    warning = event(k8s_cluster, namespace, "SpecWarning")
    assert "SGLang picks its own limit" in warning["message"]
    assert not [e for e in events(k8s_cluster, namespace) if "Spec v2 is enabled" in e.get("message", "")]


def test_scale_up_is_available_events_have_one_source_and_logs_are_quiet(
        k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess) -> None:
    body = sample()
    k8s_cluster.apply(body, namespace)
    wait_ready(k8s_cluster, namespace, NAME)
    log_start = len(operator.log_text())
    # The state looked at (one replica serving, the second not yet Ready) is held open deterministically: every
    # node is cordoned, so the scheduler leaves the new pod Pending until the nodes are uncordoned. (With a
    # timed model load instead, a loaded machine could let the window pass before the operator reported it.)
    nodes = [n["metadata"]["name"] for n in k8s_cluster.get("nodes")["items"]]
    k8s_cluster.run("cordon", *nodes)
    try:
        k8s_cluster.run("scale", "sglangserver", NAME, "-n", namespace, "--replicas=2")

        def serving_not_ready() -> dict[str, str] | None:
            obj = sgls(k8s_cluster, namespace, NAME)
            if cond(obj, "Available").get("status") != "True" or cond(obj, "Ready").get("status") != "False":
                return None
            table = k8s_cluster.run("get", "sgls", NAME, "-n", namespace, "-o", "wide").stdout.splitlines()
            return columns(table[0], table[1])  # AVAILABLE and DESIRED: -o wide
        cols = wait_for("Available=True while Ready=False", serving_not_ready, timeout=60, interval=0.2)
        assert (cols["READY"], cols["AVAILABLE"], cols["REPLICAS"], cols["DESIRED"]) == ("False", "True", "1", "2")
    finally:
        k8s_cluster.run("uncordon", *nodes)
    wait_for("2 ready replicas", lambda: sgls(k8s_cluster, namespace, NAME)["status"].get("readyReplicas") == 2,
             timeout=90)
    obj = sgls(k8s_cluster, namespace, NAME)
    assert cond(obj, "Ready")["status"] == "True" and cond(obj, "Available")["status"] == "True"
    # one event source, the operator's own
    evs = events(k8s_cluster, namespace)
    assert evs and {e.get("source", {}).get("component") or e.get("reportingComponent") for e in evs} \
        == {"sglang-operator"}
    # INFO logs only for transitions: no per-request lines (the observer scrapes every pod each second here)
    time.sleep(5)
    log = operator.log_text()[log_start:]
    assert "HTTP Request:" not in log
    info = [line for line in log.splitlines() if " INFO " in line]
    assert len(info) < 40, "\n".join(info[-40:])


def test_rolling_update_keeps_a_replica_serving(k8s_cluster: K8sCluster, namespace: str,
                                                operator: OperatorProcess) -> None:
    body = sample()
    body["spec"]["replicas"] = 2
    body["spec"]["strategy"] = {"type": "RollingUpdate", "maxUnavailable": 1}
    k8s_cluster.apply(body, namespace)
    first = wait_ready(k8s_cluster, namespace, NAME)
    dep = k8s_cluster.get("deployment", NAME, "-n", namespace)
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate",
                                       "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    k8s_cluster.run("patch", "sglangserver", NAME, "-n", namespace, "--type=merge", "-p",
                    json.dumps({"spec": {"speculative": {"numSteps": 2, "numDraftTokens": 3}}}))
    rev = first["status"]["revision"]
    serving: list[int] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        serving.append(len(ready_pods(k8s_cluster, namespace, NAME)))
        obj = sgls(k8s_cluster, namespace, NAME)
        st = obj["status"]
        if st.get("revision") != rev and st.get("phase") == "Ready" and st.get("readyReplicas") == 2:
            break
        time.sleep(0.3)
    else:
        raise AssertionError(f"rollout did not finish: {obj['status']}")
    assert min(serving) >= 1, serving  # never a moment without a serving replica (Recreate would have one)


def test_recreate_drains_in_flight_requests(k8s_cluster: K8sCluster, namespace: str,
                                            operator: OperatorProcess) -> None:
    body = sample()
    body["spec"]["strategy"] = {"drainSeconds": 60}
    body["spec"]["env"] = [e if e["name"] != "SGLANG_SIM_TIME_SCALE" else {**e, "value": "4"}
                           for e in body["spec"]["env"]]  # ≈ 200 tok/s: a 1 200-token answer takes seconds
    k8s_cluster.apply(body, namespace)
    obj = wait_ready(k8s_cluster, namespace, NAME)
    [pod] = ready_pods(k8s_cluster, namespace, NAME)
    results: list[LoadResult] = []
    started = threading.Event()

    def stream() -> None:
        started.set()
        results.append(asyncio.run(probe(f"http://{pod['status']['podIP']}:30000", max_tokens=1200, runs=1)))
    worker = threading.Thread(target=stream)
    worker.start()
    started.wait(5)
    time.sleep(1.0)  # the request is running
    k8s_cluster.run("patch", "sglangserver", NAME, "-n", namespace, "--type=merge", "-p",
                    json.dumps({"spec": {"speculative": {"numSteps": 2, "numDraftTokens": 3}}}))
    worker.join(120)
    [result] = results
    [one] = result.results
    assert one.error is None and one.completion_tokens == 1200, one  # not cut by the pod's deletion
    drained = event(k8s_cluster, namespace, "Drained", obj["status"]["revision"], timeout=60)
    assert "no running request after" in drained["message"]
    new = wait_for("the new revision", lambda: (o := sgls(k8s_cluster, namespace, NAME))["status"]
                   .get("revision") != obj["status"]["revision"] and o, timeout=30)
    wait_ready(k8s_cluster, namespace, NAME, new["status"]["revision"], timeout=90)


def test_the_default_pods_run_under_pod_security_baseline_and_a_privileged_one_is_refused(
        k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess) -> None:
    """Issue 16 item 4: with the operator's pod defaults (no token, no privilege escalation, capabilities dropped,
    RuntimeDefault seccomp) an SGLang pod is admitted by the API server's Pod Security admission at ``baseline``
    and runs; the same namespace refuses a privileged one (so the label is enforced, not ignored)."""
    k8s_cluster.run("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=baseline",
                    "pod-security.kubernetes.io/enforce-version=latest")
    k8s_cluster.apply(sample(), namespace)
    obj = wait_ready(k8s_cluster, namespace, NAME)
    (pod,) = ready_pods(k8s_cluster, namespace, NAME)
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["containers"][0]["securityContext"] == DEFAULT_SECURITY_CONTEXT
    assert obj["status"]["readyReplicas"] == 1

    privileged = sample()
    privileged["metadata"]["name"] = "privileged"
    privileged["spec"]["securityContext"] = {"privileged": True}
    k8s_cluster.apply(privileged, namespace)

    def refused_by_pod_security() -> str | None:
        evs = k8s_cluster.get("events", "-n", namespace, "--field-selector", "reason=FailedCreate")["items"]
        return next((e["message"] for e in evs if "violates PodSecurity" in e.get("message", "")), None)
    message = wait_for("the privileged pod refused by Pod Security admission", refused_by_pod_security, timeout=30)
    assert '"baseline:latest"' in message and "privileged" in message, message
    assert not [p for p in k8s_cluster.get("pods", "-n", namespace)["items"]
                if p["metadata"]["name"].startswith("privileged")]
