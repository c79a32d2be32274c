"""Import an existing SGLang deployment: a command line, or a systemd unit running one → an SGLangServer.

Input: ``[ENV=V ...] [env ...] python[3] -m sglang.launch_server ARGS`` or ``sglang serve ARGS`` (also inside
``docker run ... IMAGE ...``), or a systemd unit whose ``[Service]`` has ``ExecStart=`` (continuation lines
joined) and ``Environment=`` lines. Flags are matched against the target release's flag table the way SGLang's
argparse does (aliases and abbreviations such as ``--tp 2`` accepted), mapped to typed fields, and the rest
kept in ``extraArgs`` under their full names. ``sglang-operator render`` of the result gives back the same
flags, plus the ones the operator always sets (``--host 0.0.0.0``, ``--port``, ``--enable-metrics``).

Nothing is dropped or changed silently: the notes say which image and SGLang release were assumed, every
systemd setting not carried over (``EnvironmentFile=`` above all: its variables are not read), every variable
translated (``HF_HOME=/data/hf-cache`` becomes ``spec.model.cache``, a hostPath mounted at the same path) or
dropped (GPU selection, tokens), every value SGLang would have changed, and whether ``sglang-operator render``
would refuse the result (:attr:`Imported.refusals`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from sglang_operator.api.base import API_VERSION, KIND
from sglang_operator.api.spec import SECRET_FLAGS
from sglang_operator.sglang import flags as _flags
from sglang_operator.sglang import guidance as _guidance
from sglang_operator.sglang import versions as _versions

DEFAULT_IMAGE = "lmsysorg/sglang:v0.5.10-cu129"
"""Image assumed when the input names none (the release era of the published case)."""

#: option (any spelling in the flag table) → (spec path, value kind)
TYPED: dict[str, tuple[tuple[str, ...], str]] = {
    "--model-path": (("model", "path"), "str"),
    "--served-model-name": (("model", "servedModelName"), "str"),
    "--revision": (("model", "revision"), "str"),
    "--trust-remote-code": (("model", "trustRemoteCode"), "flag"),
    "--tp-size": (("parallelism", "tensor"), "int"),
    "--dp-size": (("parallelism", "data"), "int"),
    "--nnodes": (("parallelism", "nodes"), "int"),
    "--port": (("port",), "int"),
    "--speculative-algorithm": (("speculative", "algorithm"), "upper"),
    "--speculative-num-steps": (("speculative", "numSteps"), "int"),
    "--speculative-eagle-topk": (("speculative", "eagleTopk"), "int"),
    "--speculative-num-draft-tokens": (("speculative", "numDraftTokens"), "int"),
    "--speculative-draft-model-path": (("speculative", "draftModelPath"), "str"),
    "--mem-fraction-static": (("memory", "memFractionStatic"), "float"),
    "--context-length": (("memory", "contextLength"), "int"),
    "--max-running-requests": (("memory", "maxRunningRequests"), "int"),
    "--max-total-tokens": (("memory", "maxTotalTokens"), "int"),
    "--chunked-prefill-size": (("memory", "chunkedPrefillSize"), "int"),
    "--mamba-full-memory-ratio": (("memory", "mambaFullMemoryRatio"), "float"),
    "--mamba-scheduler-strategy": (("memory", "mambaSchedulerStrategy"), "str"),
    "--mamba-radix-cache-strategy": (("memory", "mambaSchedulerStrategy"), "str"),
    "--cuda-graph-max-bs": (("memory", "cudaGraphMaxBs"), "int"),
    "--cuda-graph-max-bs-decode": (("memory", "cudaGraphMaxBs"), "int"),
}
IGNORED = {"--host", "--enable-metrics"}  # the operator always renders these
CACHE_ENV = ("HF_HOME",)
"""Variables naming the Hugging Face cache root: translated into ``spec.model.cache`` (the operator sets
``HF_HOME`` to its mount path)."""
CACHE_SUBDIR_ENV = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "HF_DATASETS_CACHE")
"""Variables naming a cache directory: kept, with a note that the path needs a volume."""
SYSTEMD_KEPT = {"ExecStart", "Environment", "EnvironmentFile"}
_ENTRY = re.compile(r"^(.*/)?python[0-9.]*$")


class ImportError_(ValueError):
    """The input holds no SGLang command line, or a flag SGLang itself would refuse."""


@dataclass
class Imported:
    """The SGLangServer dict and notes for the user (secrets dropped, values SGLang would change, ...)."""

    server: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    """What ``sglang-operator render`` would refuse in ``server`` (empty: it renders)."""
    admission: list[str] = field(default_factory=list)
    """What the chart's default admission policy (:func:`admission_refusals`) would refuse in ``server`` at
    ``kubectl apply`` (empty: admitted, as far as offline checks go); e.g. the hostPath cache ``HF_HOME`` became."""


def parse_systemd(text: str, notes: list[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """``ExecStart`` argv and ``Environment`` variables of a unit's ``[Service]`` section; what is not carried
    over (``EnvironmentFile=``, other ``[Service]`` settings) is appended to ``notes``."""
    lines = re.sub(r"\\\n", " ", text).splitlines()
    env: dict[str, str] = {}
    argv: list[str] = []
    section = ""
    dropped: list[str] = []
    for raw in lines:
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith(("#", ";")):
            key, value = (x.strip() for x in line.split("=", 1))
            if key == "Environment":
                for item in shlex.split(value):
                    name, _, val = item.partition("=")
                    env[name] = val
            elif key == "ExecStart":
                argv = shlex.split(value.lstrip("-@+!:"))
            elif key == "EnvironmentFile" and notes is not None:
                notes.append(f"EnvironmentFile={value} dropped: the operator cannot read that file; put its "
                             "variables in spec.env (secrets through valueFrom.secretKeyRef)")
            elif key not in SYSTEMD_KEPT:
                dropped.append(f"{key}={value}")
    if not argv:
        raise ImportError_("the unit has no ExecStart= in its [Service] section")
    if dropped and notes is not None:
        notes.append(f"systemd settings not carried over: {', '.join(dropped)} (in a pod the kubelet restarts the "
                     "container; user and limits come from spec.securityContext and spec.resources)")
    return argv, env


def split_command(argv: list[str]) -> tuple[list[str], dict[str, str], str | None]:
    """(SGLang flags, env assignments, image) of a command line; raises :class:`ImportError_`."""
    env: dict[str, str] = {}
    image = None
    for i, tok in enumerate(argv):
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tok):
            name, _, val = tok.partition("=")
            env[name] = val
        elif re.search(r"sglang:[^\s/]+$", tok) and not tok.startswith("-"):
            image = tok
        elif _is_entry(argv, i):
            return argv[i + 2:], env, image
        elif tok in ("-e", "--env") and i + 1 < len(argv) and "=" in argv[i + 1]:
            name, _, val = argv[i + 1].partition("=")
            env[name] = val
    raise ImportError_("no `python -m sglang.launch_server` or `sglang serve` command found")


def _is_entry(argv: list[str], i: int) -> bool:
    """Whether ``argv[i:i+2]`` ends the entry point: ``python -m sglang.launch_server`` or ``sglang serve``."""
    nxt = argv[i + 1] if i + 1 < len(argv) else ""
    if argv[i] == "-m" and nxt == "sglang.launch_server":
        return i > 0 and bool(_ENTRY.match(argv[i - 1]))
    return argv[i].endswith("sglang") and nxt == "serve"


def _value(kind: str, raw: str) -> Any:
    if kind == "int":
        return int(raw)
    if kind == "float":
        return float(raw)
    if kind == "upper":
        return raw.upper()
    return raw


def _put(spec: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = spec
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def import_command(argv: list[str], env: dict[str, str], image: str | None = None,
                   name: str | None = None, notes_in: list[str] | None = None) -> Imported:
    """Build an SGLangServer from an SGLang argv (entry point included) and its environment.

    ``image`` defaults to one found in the command line (``docker run ... lmsysorg/sglang:TAG``), else
    :data:`DEFAULT_IMAGE`. Raises :class:`ImportError_` for unknown, ambiguous or malformed flags.
    """
    args, more_env, found_image = split_command(argv)
    env = {**more_env, **env}
    notes: list[str] = list(notes_in or ())
    chosen = image or found_image or DEFAULT_IMAGE
    try:
        version = _versions.parse_image_tag(chosen)
        table = _flags.load_table(version)
    except _versions.SGLangVersionError as err:
        raise ImportError_(f"image {chosen}: {err}") from None
    source = ("given with --image" if image else "found in the command line" if found_image
              else "assumed: the input names none; pass --image for another release")
    notes.insert(0, f"image {chosen} ({source}); flags read as SGLang {version} parses them")
    image = chosen
    spec: dict[str, Any] = {"sglang": {"image": image}}
    extra: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        m = table.match(tok)
        if m.flag is None:
            advice = _guidance.advise(version, tok)
            text = advice.text if advice.text.startswith(tok.split("=", 1)[0]) else f"{tok}: {advice.text}"
            raise ImportError_(f"{text} (flags read as SGLang {version}, image {image}; pass --image for another "
                               "release)")
        f = m.flag
        if "=" in tok:
            value: str | None = tok.split("=", 1)[1]
            i += 1
        elif f.takes_value:
            if i + 1 >= len(args):
                raise ImportError_(f"{tok} needs a value")
            value, i = args[i + 1], i + 2
        else:
            value, i = None, i + 1
        typed = next((TYPED[o] for o in f.options if o in TYPED), None)
        if any(o in IGNORED for o in f.options):
            continue
        secret = next((o for o in f.options if o in SECRET_FLAGS), None)
        if secret is not None:  # never copied: the value would show in status.command, the Deployment, events
            notes.append(f"{secret} dropped (a secret): put the value in a Secret and set {SECRET_FLAGS[secret]}")
        elif typed is None:
            extra += [f.name] + ([value] if value is not None else [])
        else:
            _put(spec, typed[0], True if typed[1] == "flag" else _value(typed[1], value or ""))
    if extra:
        spec["extraArgs"] = extra
    _import_env(spec, env, notes)
    _fix_draft_tokens(spec, notes)
    model = spec.get("model", {})
    base = name or str(model.get("servedModelName") or model.get("path", "sglang")).rsplit("/", 1)[-1]
    server = {"apiVersion": API_VERSION, "kind": KIND,
              "metadata": {"name": dns_label(base)}, "spec": spec}
    return Imported(server, notes, refusals(server), admission_refusals(server))


def refusals(server: dict[str, Any]) -> list[str]:
    """What ``sglang-operator render`` would refuse in ``server``: schema, CEL and release rules
    (:func:`sglang_operator.builders.refusals`)."""
    from sglang_operator.builders import refusals as render_refusals

    return render_refusals(server)


def admission_refusals(server: dict[str, Any], namespace: str = "default") -> list[str]:
    """What the chart's default admission policy (``admissionPolicy`` values as shipped: level ``baseline``, no
    ``allowedHostPaths``, ``hostPathWrites: Forbidden``; :class:`sglang_operator.builders.admission_kinds.Params`) would
    refuse in ``server`` applied in ``namespace``, in the API server's words."""
    from sglang_operator.builders import admission
    from sglang_operator.builders.admission_kinds import Params

    body = {**server, "metadata": {**server.get("metadata", {}), "namespace": namespace}}
    return list(admission.check(body, Params()).refusals)


def _import_env(spec: dict[str, Any], env: dict[str, str], notes: list[str]) -> None:
    extra_env = []
    for key, val in env.items():
        if key in CACHE_ENV and val.startswith("/"):
            spec.setdefault("model", {})["cache"] = {"hostPath": val, "mountPath": val}
            notes.append(f"{key}={val} translated into spec.model.cache: hostPath {val} of the node, mounted at "
                         f"{val} ({key} is set to it); use a pvc instead for a cache shared by several nodes (the "
                         "chart's default admission policy refuses a hostPath: see the warnings)")
        elif key in CACHE_SUBDIR_ENV and val.startswith("/"):
            extra_env.append({"name": key, "value": val})
            notes.append(f"{key}={val} kept in spec.env, but {val} needs a volume in the pod: set spec.model.cache "
                         "(whose mount path becomes HF_HOME) or add spec.volumes and spec.volumeMounts")
        elif key == "SGLANG_ENABLE_SPEC_V2" and "speculative" in spec:
            spec["speculative"]["specV2"] = val.strip().lower() in ("1", "true", "yes", "y", "on")
        elif key in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
            notes.append(f"{key} dropped: in a pod the GPU device plugin assigns the GPUs")
        elif key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
            notes.append(f"{key} dropped: put the token in a Secret and set spec.model.tokenSecretRef")
        else:
            extra_env.append({"name": key, "value": val})
    if extra_env:
        spec["env"] = extra_env


def _fix_draft_tokens(spec: dict[str, Any], notes: list[str]) -> None:
    s = spec.get("speculative")
    if not s or s.get("eagleTopk", 1) != 1 or "numDraftTokens" not in s:
        return
    steps = s.get("numSteps", 3)
    if s["numDraftTokens"] != steps + 1:
        notes.append(
            f"--speculative-num-draft-tokens {s['numDraftTokens']} with eagle-topk 1: SGLang ran with "
            f"{steps + 1} (num-steps + 1); imported as {steps + 1}"
        )
        s["numDraftTokens"] = steps + 1


def dns_label(text: str) -> str:
    """``text`` as a DNS-1035 label (lowercase, ``[a-z0-9-]``, starts with a letter, ≤ 63 chars)."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    label = label if label[:1].isalpha() else f"sglang-{label}".rstrip("-")
    return label[:63].rstrip("-") or "sglang"


def import_text(text: str, image: str | None = None, name: str | None = None) -> Imported:
    """Import a systemd unit (when it has a ``[Service]`` section) or a shell command line."""
    notes: list[str] = []
    if re.search(r"^\s*\[Service\]\s*$", text, re.M):
        argv, env = parse_systemd(text, notes)
    else:
        try:
            argv, env = shlex.split(re.sub(r"\\\n", " ", text), comments=True), {}
        except ValueError as err:
            raise ImportError_(f"not a shell command line: {err}") from None
    return import_command(argv, env, image, name, notes)
