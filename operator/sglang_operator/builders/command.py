"""SGLangServer spec → the SGLang command line (entry point, flags, env) in the target release's dialect.

Rules (facts from ``../shared/sglang`` §0, §1a, §1b, §6; SGLang files cited per rule):

- ``--host 0.0.0.0``, ``--port`` and ``--enable-metrics`` are always rendered (``/metrics`` shares the port).
- Speculative decoding renders all three of ``--speculative-num-steps``, ``--speculative-eagle-topk`` and
  ``--speculative-num-draft-tokens``: partial sets crash SGLang (AssertionError / TypeError in
  ``python/sglang/srt/server_args.py:_handle_speculative_decoding``). An omitted numDraftTokens is derived as
  SGLang derives it: ``num_steps + 1`` when ``eagle_topk == 1`` (SGLang forces that value), 12 for NGRAM.
- ``SGLANG_ENABLE_SPEC_V2`` is rendered only on releases that read it (``python/sglang/srt/environ.py``;
  removed in 0.5.14), and only when ``specV2`` differs from the release's default: ``=1`` on 0.5.10 (opt-in),
  ``=0`` on 0.5.11–0.5.13 with specV2 false (default on there).
- Secrets never appear in the argv: ``--api-key $(SGLANG_API_KEY)`` (and ``--admin-api-key``,
  ``--ssl-keyfile-password``: :data:`SECRET_ENV`) is expanded by the kubelet from the env, which references the
  Secret by name (``valueFrom.secretKeyRef``). A release without the flag is refused by validation
  (:mod:`.validate`, ``typed-flag-in-release``).
- ``spec.speculative.adaptive`` renders ``--speculative-adaptive`` (0.5.11 on) and, with a ConfigMap, a
  ``--speculative-adaptive-config`` path under :data:`ADAPTIVE_CONFIG_DIR` where the key is mounted.
- Multi-node (``parallelism.nodes`` > 1): ``--nnodes``, ``--node-rank 0`` (the leader's argv; the worker template
  of the LeaderWorkerSet puts ``$(LWS_WORKER_INDEX)`` there, :mod:`.leaderworkerset`) and one
  ``--dist-init-addr $(LWS_LEADER_ADDRESS):20000`` (``python/sglang/srt/server_args.py``: ``host:port`` of rank 0,
  where the ranks' torch.distributed store listens); ``--pp-size`` whenever pipeline > 1.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from sglang_operator.api.blocks import SpeculativeAlgorithm
from sglang_operator.api.spec import SGLangServerSpec, flag_name
from sglang_operator.builders.dialect import Dialect, Release, SGLangVersion, resolve_release

API_KEY_ENV = "SGLANG_API_KEY"
SECRET_ENV: dict[str, str] = {
    "--api-key": API_KEY_ENV,
    "--admin-api-key": "SGLANG_ADMIN_API_KEY",
    "--ssl-keyfile-password": "SGLANG_SSL_KEYFILE_PASSWORD",
}
"""Flag of :data:`sglang_operator.api.spec.SECRET_FLAGS` → the env var its Secret reference renders
(``valueFrom.secretKeyRef``); the argv holds ``--flag $(VAR)``, which the kubelet expands at container start."""
HF_TOKEN_ENV = "HF_TOKEN"
SPEC_V2_ENV = "SGLANG_ENABLE_SPEC_V2"
NGRAM_DEFAULT_DRAFT_TOKENS = 12
"""SGLang's default ``speculative_num_draft_tokens`` for NGRAM (``server_args.py``, NGRAM branch)."""
SPEC_DEFAULT_MAX_RUNNING_REQUESTS = 48
"""What SGLang sets ``max_running_requests`` to under speculative decoding when unset (``server_args.py``)."""
ADAPTIVE_CONFIG_DIR = "/etc/sglang-operator/speculative-adaptive"
"""Where ``spec.speculative.adaptive.configMapRef`` is mounted (read-only): ``--speculative-adaptive-config`` is a
path to a JSON file (``python/sglang/srt/speculative/adaptive_spec_params.py``: ``json.load(open(path))``)."""
ADAPTIVE_CONFIG_VOLUME = "speculative-adaptive-config"
NODE_RANK_FLAG = "--node-rank"
LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"
"""Env var the LeaderWorkerSet pod webhook sets in every pod of a group to the leader's DNS name
``<lws>-<group>.<subdomain>.<namespace>`` (plain value; sigs.k8s.io/lws v0.7.0 ``pkg/utils/pod/pod_utils.go``
``AddLWSVariables``, with ``LWS_GROUP_SIZE`` and ``LWS_WORKER_INDEX``)."""
WORKER_INDEX_ENV = "LWS_WORKER_INDEX"
"""The pod's index in its group (0 = leader), set by the same webhook."""
DIST_INIT_PORT = 20000
"""Port of ``--dist-init-addr`` on the leader (the port of the LWS project's SGLang example)."""


@dataclass(frozen=True)
class RenderedCommand:
    """The SGLang process of one pod.

    ``command`` is the entry point (container ``command``), ``args`` the flags (container ``args``), ``env``
    Kubernetes EnvVar dicts the operator adds (before ``spec.env``), ``warnings`` human-readable notes for the
    SpecValid condition, ``num_draft_tokens`` the rendered value (None without speculative decoding).
    """

    version: SGLangVersion
    dialect: Dialect
    command: list[str]
    args: list[str]
    env: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    num_draft_tokens: int | None = None
    release: Release | None = None
    """The release the command was rendered for, resolved once (validation and the argument resolution use it)."""

    @property
    def literal_env(self) -> dict[str, str]:
        """Env vars with literal values (no secrets), as ``resolve_server_args`` wants them."""
        return {e["name"]: e["value"] for e in self.env if "value" in e}

    @property
    def command_line(self) -> str:
        """One shell line: literal env assignments, entry point, flags (e.g. for ``status.command``)."""
        env = [f"{k}={shlex.quote(v)}" for k, v in self.literal_env.items() if k != "HF_HOME"]
        return " ".join([*env, shlex.join([*self.command, *self.args])])


def adaptive_config_path(key: str) -> str:
    """The path ``--speculative-adaptive-config`` names for ConfigMap key ``key`` (in :data:`ADAPTIVE_CONFIG_DIR`)."""
    return f"{ADAPTIVE_CONFIG_DIR}/{key}"


def derive_num_draft_tokens(algorithm: SpeculativeAlgorithm, num_steps: int, eagle_topk: int,
                            explicit: int | None) -> int:
    """``--speculative-num-draft-tokens`` to render: the explicit value, or SGLang's own derivation.

    Raises ValueError when it cannot be derived (eagleTopk > 1 without an explicit value; the CRD refuses it).
    """
    if explicit is not None:
        return explicit
    if algorithm is SpeculativeAlgorithm.NGRAM:
        return NGRAM_DEFAULT_DRAFT_TOKENS
    if eagle_topk == 1:
        return num_steps + 1
    raise ValueError("spec.speculative.numDraftTokens is required when eagleTopk > 1")


def _num(value: float) -> str:
    """A number as SGLang's argparse takes it (``0.88``, ``131072``)."""
    return repr(value) if isinstance(value, float) else str(value)


def render_command(spec: SGLangServerSpec, release: Release | None = None) -> RenderedCommand:
    """Render ``spec`` for its SGLang release: ``release``, resolved once by the caller (:func:`resolve_release`),
    else resolved here. Raises ``VersionError`` when the release is unsupported."""
    release = release or resolve_release(spec.sglang)
    version, d = release.version, release.dialect
    args: list[str] = ["--model-path", spec.model.path]
    env: list[dict[str, Any]] = []
    warnings: list[str] = [d.warning] if d.warning else []  # a release newer than the newest known one
    m = spec.model
    if m.served_model_name:
        args += ["--served-model-name", m.served_model_name]
    if m.revision:
        args += ["--revision", m.revision]
    if m.trust_remote_code:
        args.append("--trust-remote-code")
    args += ["--host", "0.0.0.0", "--port", str(spec.port), "--tp-size", str(spec.parallelism.tensor)]
    if spec.parallelism.pipeline > 1:
        args += ["--pp-size", str(spec.parallelism.pipeline)]
    if spec.parallelism.data > 1:
        args += ["--dp-size", str(spec.parallelism.data)]
    if spec.parallelism.nodes > 1:
        args += ["--nnodes", str(spec.parallelism.nodes), NODE_RANK_FLAG, "0",
                 "--dist-init-addr", f"$({LEADER_ADDRESS_ENV}):{DIST_INIT_PORT}"]
    args.append("--enable-metrics")
    for flag, ref in spec.secret_refs().items():
        args += [flag, f"$({SECRET_ENV[flag]})"]
        env.append(_secret_env(SECRET_ENV[flag], ref.name, ref.key))
    if spec.ssl_keyfile_password_secret_ref and not any(flag_name(a) == "--ssl-keyfile" for a in spec.extra_args):
        warnings.append("spec.sslKeyfilePasswordSecretRef has no effect without --ssl-keyfile in spec.extraArgs "
                        "(SGLang serves plain HTTP); add --ssl-keyfile and --ssl-certfile, or remove the reference")
    ndt = None
    s = spec.speculative
    if s is not None:
        ndt = derive_num_draft_tokens(s.algorithm, s.num_steps, s.eagle_topk, s.num_draft_tokens)
        args += [
            "--speculative-algorithm", s.algorithm.value,
            "--speculative-num-steps", str(s.num_steps),
            "--speculative-eagle-topk", str(s.eagle_topk),
            "--speculative-num-draft-tokens", str(ndt),
        ]
        if s.draft_model_path:
            args += ["--speculative-draft-model-path", s.draft_model_path]
        if s.adaptive is not None and s.adaptive.enabled:
            args.append("--speculative-adaptive")  # a release without it is refused (validate: typed-flag-in-release)
            if s.adaptive.config_map_ref is not None:
                args += ["--speculative-adaptive-config", adaptive_config_path(s.adaptive.config_map_ref.key)]
        if d.spec_v2_env and s.spec_v2 != d.spec_v2_default:
            env.append({"name": SPEC_V2_ENV, "value": "1" if s.spec_v2 else "0"})
        elif s.spec_v2 and not d.spec_v2_env:
            warnings.append(
                f"spec.speculative.specV2 has no effect on SGLang {version} ({SPEC_V2_ENV} is not read by that "
                + ("release; the V2 worker is always used); not rendered" if d.spec_v2_worker
                   else "release, which has no V2 worker); not rendered")
            )
        if spec.memory.max_running_requests is None:
            warnings.append(
                "spec.memory.maxRunningRequests is unset: under speculative decoding SGLang picks its own limit "
                f"(at most {SPEC_DEFAULT_MAX_RUNNING_REQUESTS}, fewer when the KV cache is small); the effective "
                "value will appear in status.effective.maxRunningRequests. Set spec.memory.maxRunningRequests to "
                "choose it"
            )
        if s.algorithm is SpeculativeAlgorithm.NGRAM and s.eagle_topk != 1:
            warnings.append("NGRAM: SGLang replaces eagleTopk by --speculative-ngram-max-bfs-breadth")
    args += _memory_args(spec, d)
    args += spec.extra_args
    if m.token_secret_ref:
        env.append(_secret_env(HF_TOKEN_ENV, m.token_secret_ref.name, m.token_secret_ref.key))
    if m.cache:
        env.append({"name": "HF_HOME", "value": m.cache.mount_path})
    return RenderedCommand(version, d, list(d.entry_point), args, env, warnings, ndt, release)


def _memory_args(spec: SGLangServerSpec, d: Dialect) -> list[str]:
    mem = spec.memory
    pairs: list[tuple[str, float | int | str | None]] = [
        ("--mem-fraction-static", mem.mem_fraction_static),
        ("--context-length", mem.context_length),
        ("--max-running-requests", mem.max_running_requests),
        ("--max-total-tokens", mem.max_total_tokens),
        ("--chunked-prefill-size", mem.chunked_prefill_size),
        ("--mamba-full-memory-ratio", mem.mamba_full_memory_ratio),
        ("--mamba-scheduler-strategy", mem.mamba_scheduler_strategy.value if mem.mamba_scheduler_strategy else None),
        ("--cuda-graph-max-bs", mem.cuda_graph_max_bs),  # --cuda-graph-max-bs-decode from 0.5.14 (d.flag)
    ]
    out: list[str] = []
    for flag, value in pairs:
        if value is not None:
            out += [d.flag(flag), value if isinstance(value, str) else _num(value)]
    return out


def _secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
