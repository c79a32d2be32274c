"""The I/O of one observation (the observer's gather) and the reads of a server's pods in it.

:class:`Gatherer` is the collaborator of :class:`~sglang_operator.control.observer.Observer` that reads: the pods
from the watched cache, ``/server_info`` once per revision when Ready, the image digest, the interval's samples
(:mod:`sglang_operator.io.sampler`). Reads of a server's pods are fair to every other server:

- every read has a short deadline (:data:`~sglang_operator.io.sglang_http.READ_TIMEOUT_SECONDS`), and a server's
  reads run at the same time (``/server_info`` beside the scrapes of every Ready pod), so one observation waits
  about one deadline at most (and for the probe it sent an interval earlier, whose own deadline is then nearly
  over);
- while the observation waits on its pods it holds none of the observer's shared slots
  (:func:`sglang_operator.control.ticks.slot_released`), nor one of the HTTP client's (held only while a body is
  read, :meth:`~sglang_operator.io.sglang_http.SGLangHTTP.get`);
- a server whose reads all timed out is read less often: the back-off of
  :mod:`sglang_operator.decisions.sampling.backoff`, kept in its
  :attr:`Reads.backoff <sglang_operator.control.memory.Reads.backoff>` and reset by any answer. While it waits, the
  observation goes on from the watch alone (pods' health, status), with no sample ("not due").
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from sglang_operator.api.base import ABORT_ANNOTATION
from sglang_operator.api.server import SGLangServer
from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.api.status import ConditionType, SGLangServerStatus
from sglang_operator.api.view import ServerView
from sglang_operator.builders.labels import REVISION_LABEL
from sglang_operator.builders.revision import recorded_digest
from sglang_operator.control import ledger, restore
from sglang_operator.control.memory import ServerMemory, TuningRequests
from sglang_operator.control.ticks import slot_released
from sglang_operator.decisions import effective as effective_rules
from sglang_operator.decisions import groups, judging
from sglang_operator.decisions import status as status_decisions
from sglang_operator.decisions.canary import CanaryObservation
from sglang_operator.decisions.derive import speculative_condition
from sglang_operator.decisions.observation import Observed
from sglang_operator.decisions.pods import trouble
from sglang_operator.decisions.rollback_state import Observation, setup_of
from sglang_operator.decisions.sampling import backoff, budget
from sglang_operator.decisions.sampling.model import Sample, SampleKind, Signal
from sglang_operator.decisions.sampling.roles import roles_for
from sglang_operator.decisions.tuning import hold as holds
from sglang_operator.io import kube
from sglang_operator.io.pods import PodCache, targets
from sglang_operator.io.sampler import ANSWERED, Sampler, ServerRef, sampling_params
from sglang_operator.io.sglang_http import ScrapeError, SGLangHTTP, base_url
from sglang_operator.process import telemetry
from sglang_operator.sglang.versions import SGLangVersionError, dialect, parse_version

log = logging.getLogger("sglang_operator.control.observer")


def requested_settings(server_spec: Any, num_draft_tokens: int | None) -> dict[str, Any]:
    """What the spec asks SGLang for, keyed as :data:`decisions.effective.FIELDS` (unset keys left out)."""
    out: dict[str, Any] = {}
    spec_dec = server_spec.speculative
    if spec_dec is not None:
        out |= {"algorithm": spec_dec.algorithm.value, "numSteps": spec_dec.num_steps,
                "eagleTopk": spec_dec.eagle_topk, "numDraftTokens": num_draft_tokens}
        if spec_dec.adaptive is not None and spec_dec.adaptive.enabled:
            out["adaptive"] = True
    mem = server_spec.memory
    for key, value in (("maxRunningRequests", mem.max_running_requests),
                       ("memFractionStatic", mem.mem_fraction_static), ("contextLength", mem.context_length)):
        if value is not None:
            out[key] = value
    return out


async def read_effective(
    http: SGLangHTTP, url: str, version: str, status: SGLangServerStatus, server_spec: Any, namespace: str = "default",
    reads: list[str] | None = None, pod: str = "",
) -> tuple[dict[str, Any] | None, list[str] | None, str | None]:
    """(new effective settings or None, differences or None, why the pod is not SGLang or None) of a Ready server at
    ``url`` (its pod ``pod``).

    ``/server_info`` is read once per revision (within the client's default deadline,
    :data:`~sglang_operator.io.sglang_http.READ_TIMEOUT_SECONDS`), again at every call while it has not answered as
    SGLang; the differences are recomputed every call from the effective settings (new or already in status), None
    while none were read back (:func:`~sglang_operator.decisions.effective.read_back`). An answer that is not
    SGLang's (not a JSON object, or one without any of SGLang's server arguments) gives no settings and the sentence
    of :func:`~sglang_operator.decisions.effective.not_sglang` naming ``spec.sglang.image``. Failures are logged and
    counted, never raised. ``reads``: when given, the read's outcome is appended to it (``answered``, or the
    :class:`ScrapeError` reason)."""
    effective, foreign = None, None
    stored = status.effective.dump() if status.effective is not None else None
    if not effective_rules.read_back(stored):
        path = "/server_info"
        try:
            path = dialect(parse_version(version)).server_info_path
            ref = server_spec.api_key_secret_ref  # SGLang's --api-key guards /server_info (not /metrics)
            api_key = await kube.secret_value(namespace, ref.name, ref.key) if ref is not None else None
            info = await http.server_info(url, path, api_key=api_key)
            if effective_rules.serves_sglang(info):
                effective = effective_rules.effective_settings(info)
            else:
                foreign = effective_rules.not_sglang(pod or url, path, server_spec.sglang.image,
                                                     "a JSON object without SGLang's server arguments")
            if reads is not None:
                reads.append("answered")
        except ScrapeError as err:
            telemetry.count_scrape_error("server_info", err.reason)
            log.debug("server info not read yet: %s", err)
            if err.reason == "parse":  # an answer, but not a JSON object: not SGLang
                foreign = effective_rules.not_sglang(pod or url, path, server_spec.sglang.image,
                                                     "a body that is not a JSON object")
            if reads is not None:
                reads.append("answered" if err.reason in ANSWERED else err.reason)
    known = effective_rules.read_back(effective or stored)
    diffs = None
    if known:
        diffs = effective_rules.differences(requested_settings(server_spec, status.num_draft_tokens), known)
    return effective, diffs, foreign


Reads = tuple[dict[str, Any] | None, list[str] | None, list[Sample] | None, dict[str, Any], float, str | None]
"""What the reads of one observation found: (effective settings, differences, samples, status figures, interval s,
why the serving pod is not SGLang)."""


def _backed_off(status: SGLangServerStatus) -> bool:
    """Whether the stored status says the server's sampling is backed off (``SamplingBackedOff=True``)."""
    c = status.condition(ConditionType.SAMPLING_BACKED_OFF)
    return c is not None and c.status == "True"


def _revision_of(pod: Mapping[str, Any]) -> str | None:
    """A pod's ``sglang-operator.io/revision`` label."""
    return ((pod.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL)


class Gatherer:
    """The observer's reader (:attr:`Observer.gatherer <sglang_operator.control.observer.Observer.gatherer>`, a
    collaborator; see the module docstring): reads the pods from ``pods`` (the watched cache), SGLang through the
    client ``http()`` gives and the sampler ``sampler()`` gives (both made by the observer at first use: callables,
    read at each use), exports to ``series``, asks ``tunings`` what each server's SGLangTunings want and
    ``spec_revision`` (the observer's ``_spec_revision``, cached in the server's memory) what the
    spec renders to. ``sample_interval``: the operator-wide sampling interval (s; None: each server's own);
    ``hold_max_seconds``: how long an InPlace tuning may hold a server (None: no bound). Writes the sampler's
    fields of the server's memory (:data:`sglang_operator.control.memory.WRITERS`)."""

    def __init__(self, pods: PodCache, series: telemetry.ServerSeries, tunings: TuningRequests,
                 http: Callable[[], SGLangHTTP], sampler: Callable[[], Sampler],
                 spec_revision: Callable[[ServerMemory, SGLangServer, ServerView], str | None],
                 sample_interval: float | None, hold_max_seconds: float | None) -> None:
        self.pods, self.series, self.tunings = pods, series, tunings
        self._http, self._sampler, self._spec_revision = http, sampler, spec_revision
        self.sample_interval, self.hold_max_seconds = sample_interval, hold_max_seconds

    @property
    def http(self) -> SGLangHTTP:
        """The observer's HTTP client for SGLang pods."""
        return self._http()

    @property
    def sampler(self) -> Sampler:
        """The observer's sampler."""
        return self._sampler()

    async def gather(self, mem: ServerMemory, view: ServerView, server: SGLangServer, spec: SGLangServerSpec,
                     now: dt.datetime) -> tuple[Observed, Any]:
        """The I/O of one observation: the pods (from the cache), ``/server_info`` once Ready, the image digest, the
        interval's samples. Returns what was observed and the policy in force (``intervalSeconds`` the sampling
        interval). ``view``: the object, its status with what the server's job applied (a revision applied);
        ``spec``: the spec it runs."""
        status = view.status
        revision = str(status.revision)
        generation = view.generation
        pods = await self.pods.owned(server.namespace, server.name, (view.uid,))  # never strangers
        running = status.canary
        canary_rev = running.revision if running is not None else None
        health_spec = spec if running is None else spec.model_copy(update={"replicas": running.stable_replicas})
        health = groups.serving_health(pods, spec, revision, running, generation, now)  # per group multi-node
        policy = server.spec.rollback
        if judging.warm_up_ends(status.analysis, policy.warmup_seconds, now):  # align the first judged interval
            Sampler.restart_interval(mem.reads.sampling)
        effective, diffs, samples, figures, interval, foreign = await self._read_pods(mem, view, spec, policy, health,
                                                                                     pods, now)
        known = effective_rules.read_back(effective or (status.effective.dump() if status.effective else None)) or None
        self.series.export_effective(server.namespace, server.name, revision, known)  # for 0.5.10's missing gauges
        policy = policy.model_copy(update={"interval_seconds": max(1, round(interval))})
        sample = judging.sample_for(samples, revision)
        stable_views = groups.pod_views(pods, spec, revision)
        annotations = view.annotations
        canary_obs = None
        if running is not None or server.spec.strategy.canary_policy is not None:
            mine = [p for p in pods if canary_rev and _revision_of(p) == canary_rev
                    and not (p.get("metadata") or {}).get("deletionTimestamp")]
            canary_obs = CanaryObservation(
                policy=server.spec.strategy.canary_policy, replicas=server.spec.replicas, name=server.name,
                serving_workload=status.serving_workload,
                pods=groups.pod_views(pods, spec, canary_rev) if canary_rev else (),
                stable_ready=sum(v.ready for v in stable_views),
                sample=judging.sample_for(samples, canary_rev) if canary_rev else None,
                pending=next((t for t in map(trouble, mine) if t), None),
                promote_token=annotations.get(judging.PROMOTE_ANNOTATION),
                abort_token=annotations.get(ABORT_ANNOTATION))
        observation = Observation(
            revision=revision, desired_pods=health_spec.replicas, setup=setup_of(spec), pods=stable_views,
            spec_revision=None if mem.apply_failure else self._spec_revision(mem, server, view),  # kopf retries
            retry_token=restore.retry_token(view), canary=canary_obs, not_sglang=foreign)
        speculative = speculative_condition(
            spec.speculative.algorithm.value if spec.speculative else None,
            known,
            None if sample is None or sample.kind is not SampleKind.MEASURED
            else sample.figures.accept_length is not None,
            health.phase == "Ready", generation, now)
        return Observed(
            now=now, generation=generation, health=health, observation=observation, effective=effective, diffs=diffs,
            samples=samples, figures=figures, speculative=speculative,
            promote_token=view.annotations.get(judging.PROMOTE_ANNOTATION),
            apply_failure=mem.apply_failure, apply_failure_reason=mem.apply_failure_reason, previous_diffs=mem.diffs,
            tunings=self.tunings.of(mem.key),
            spec_hash=self._spec_hash(mem, view), hold_max_seconds=self.hold_max_seconds,
            settings=self.tunings.settings_condition(server.namespace, spec, generation, now, view),
            sampling=budget.condition(mem.reads.sampling.cost, self.sampler.limits.cpu_budget_seconds, interval,
                                      _backed_off(status), generation, now)), policy

    async def _read_pods(self, mem: ServerMemory, view: ServerView, spec: SGLangServerSpec, policy: Any, health: Any,
                         pods: list[dict[str, Any]], now: dt.datetime) -> Reads:
        """``/server_info`` (when Ready) and the interval's samples, read at the same time without an observer slot,
        unless the server's back-off says wait: (effective, diffs, samples, figures, interval seconds, why the serving
        pod is not SGLang)."""
        status = view.status
        ready = [t.name for t in targets(pods) if t.ready and t.ip]
        clock = time.monotonic()
        interval = float(self.sample_interval or policy.interval_seconds)
        if not backoff.may_read(mem.reads.backoff, clock, ready):  # no answer lately: the watch alone this time
            stored = status.effective.dump() if status.effective is not None else None
            stored = effective_rules.read_back(stored)
            diffs = effective_rules.differences(requested_settings(spec, status.num_draft_tokens), stored) \
                if stored and health.phase == "Ready" and health.pod_ips else None
            return None, diffs, None, {}, interval, None
        reads: list[str] = []
        info = None
        if health.phase == "Ready" and health.pod_ips:
            pod = next((t.name for t in targets(pods) if t.ip == health.pod_ips[0]), health.pod_ips[0])
            info = read_effective(self.http, base_url(health.pod_ips[0], spec.port), status.sglang_version or "",
                                  status, spec, mem.namespace, reads, pod)
        mem.reads.sampling.reads = None
        async with slot_released():
            if info is not None:
                (effective, diffs, foreign), (samples, figures, interval) = await asyncio.gather(
                    info, self.sample(view, spec, policy, now, mem))
            else:
                effective, diffs, foreign = None, None, None
                samples, figures, interval = await self.sample(view, spec, policy, now, mem)
        if info is not None:
            await self._note_digest(mem, str(status.revision), pods)
        if mem.reads.sampling.reads is not None:
            answered, timed_out = mem.reads.sampling.reads
            reads += ["answered"] * answered + ["timeout"] * timed_out
        mem.reads.backoff = backoff.after_reads(mem.reads.backoff, time.monotonic(), interval, ready,
                                               answered=reads.count("answered"), timed_out=reads.count("timeout"))
        return effective, diffs, samples, figures, interval, foreign

    @staticmethod
    def _spec_hash(mem: ServerMemory, view: ServerView) -> str:
        """The object's spec hashed without ``replicas`` (:func:`~sglang_operator.decisions.tuning.hold.spec_hash`),
        once per generation."""
        if mem.hold.spec_hash is None or mem.hold.spec_hash[0] != view.generation:
            mem.hold.spec_hash = (view.generation, holds.spec_hash(view.spec_data))
        return mem.hold.spec_hash[1]

    async def _note_digest(self, mem: ServerMemory, revision: str, pods: list[dict[str, Any]]) -> None:
        """Record, once per revision, the image digest its Ready pods run on its ControllerRevision."""
        if revision in mem.reads.digests:
            return
        ns, name = mem.key
        mine = [p for p in pods if _revision_of(p) == revision and not p.get("metadata", {}).get("deletionTimestamp")]
        cr = await ledger.load(ns, name, revision, mem.uid)
        known = recorded_digest(cr)
        digest = await ledger.note_digest(ns, name, revision, mine, known) if cr is not None else None
        if digest is not None:
            mem.reads.digests[revision] = digest

    async def sample(self, view: ServerView, spec: Any, policy: Any, now: dt.datetime,
                     mem: ServerMemory) -> tuple[list[Sample] | None, dict[str, Any], float]:
        """Sample the server when its interval has passed: export every revision's sample; return the samples
        (None: not due), the status figures of the serving revision (:func:`decisions.status.figures_patch`;
        ``{}`` when nothing to write) and the sampling interval in seconds. ``spec``: the applied spec (port,
        model, API key); ``policy``: the object's ``spec.rollback`` (signal, interval, probe)."""
        status = view.status
        ns, name = view.namespace, view.name
        if status.tuning_hold is not None:  # an InPlace tuning measures its trial: no probe beside its load
            return None, {}, float(self.sample_interval or policy.interval_seconds)
        try:
            roles = roles_for(parse_version(status.sglang_version or ""))
        except SGLangVersionError:
            return None, {}, float(self.sample_interval or policy.interval_seconds)
        params = sampling_params(policy, self.sample_interval)
        if not self.sampler.due(mem.reads.sampling, params.interval_seconds, now):
            return None, {}, params.interval_seconds
        api_key = None
        ref = spec.api_key_secret_ref
        if ref is not None and params.signal is Signal.PROBE:
            api_key = await kube.secret_value(ns, ref.name, ref.key)
        server = ServerRef(ns, name, roles, spec.port, spec.model.served_model_name or spec.model.path,
                           mem.reads.sampling, speculative=spec.speculative is not None)
        samples = await self.sampler.sample(  # multi-node: one target per group, its leader
            server, lambda: targets(groups.serving_pods(self.pods.owned_now(ns, name, (mem.uid,)), spec)), params,
            api_key)
        self.series.export(ns, name, samples)
        for s in samples:
            log.debug("%s/%s revision %s: %s %s %s", ns, name, s.revision, s.kind.value, s.reason, s.figures)
        serving = next((s for s in samples if s.revision == status.revision and s.kind is SampleKind.MEASURED), None)
        if serving is None:
            return samples, {}, params.interval_seconds
        patch = status_decisions.figures_patch(status, serving.figures, serving.end, now)
        return samples, patch, params.interval_seconds
