"""Import an existing SGLang deployment: a command line, or a systemd unit running one → an SGLangServer.

Input: ``[ENV=V ...] [env ...] python[3] -m sglang.launch_server ARGS`` or ``sglang serve ARGS`` (also inside
``docker run ... IMAGE ...``), or a systemd unit whose ``[Service]`` has ``ExecStart=`` (continuation lines
joined) and ``Environment=`` lines. Flags are matched against the target release's flag table the way SGLang's
argparse does (aliases and abbreviations such as ``--tp 2`` accepted), mapped to typed fields, and the rest
kept in ``extraArgs`` under their full names. ``sglang-operator render`` of the result gives back the same
flags, plus the ones the operator always sets (``--host 0.0.0.0``, ``--port``, ``--enable-metrics``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from sglang_operator.sglang import flags as _flags
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
}
IGNORED = {"--host", "--enable-metrics"}  # the operator always renders these
_ENTRY = re.compile(r"^(.*/)?python[0-9.]*$")


class ImportError_(ValueError):
    """The input holds no SGLang command line, or a flag SGLang itself would refuse."""


@dataclass
class Imported:
    """The SGLangServer dict and notes for the user (secrets dropped, values SGLang would change, ...)."""

    server: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def parse_systemd(text: str) -> tuple[list[str], dict[str, str]]:
    """``ExecStart`` argv and ``Environment`` variables of a unit's ``[Service]`` section."""
    lines = re.sub(r"\\\n", " ", text).splitlines()
    env: dict[str, str] = {}
    argv: list[str] = []
    section = ""
    for raw in lines:
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith(("#", ";")):
            key, value = line.split("=", 1)
            if key.strip() == "Environment":
                for item in shlex.split(value):
                    name, _, val = item.partition("=")
                    env[name] = val
            elif key.strip() == "ExecStart":
                argv = shlex.split(value.lstrip("-@+!:"))
    if not argv:
        raise ImportError_("the unit has no ExecStart= in its [Service] section")
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
                   name: str | None = None) -> Imported:
    """Build an SGLangServer from an SGLang argv (entry point included) and its environment.

    ``image`` defaults to one found in the command line (``docker run ... lmsysorg/sglang:TAG``), else
    :data:`DEFAULT_IMAGE`. Raises :class:`ImportError_` for unknown, ambiguous or malformed flags.
    """
    args, more_env, found_image = split_command(argv)
    env = {**more_env, **env}
    image = image or found_image or DEFAULT_IMAGE
    try:
        table = _flags.load_table(_versions.parse_image_tag(image))
    except _versions.SGLangVersionError as err:
        raise ImportError_(str(err)) from None
    spec: dict[str, Any] = {"sglang": {"image": image}}
    notes: list[str] = []
    extra: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        m = table.match(tok)
        if m.flag is None:
            raise ImportError_(f"{tok}: {m.kind} option for SGLang {table.version} ({', '.join(m.options)})")
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
        if "--api-key" in f.options:
            notes.append("--api-key dropped: put the key in a Secret and set spec.apiKeySecretRef")
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
    server = {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer",
              "metadata": {"name": dns_label(base)}, "spec": spec}
    return Imported(server, notes)


def _import_env(spec: dict[str, Any], env: dict[str, str], notes: list[str]) -> None:
    extra_env = []
    for key, val in env.items():
        if key == "SGLANG_ENABLE_SPEC_V2" and "speculative" in spec:
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
    if re.search(r"^\s*\[Service\]\s*$", text, re.M):
        argv, env = parse_systemd(text)
    else:
        argv, env = shlex.split(re.sub(r"\\\n", " ", text), comments=True), {}
    return import_command(argv, env, image, name)
