"""The image → local command mapping (``e2e/images.yaml``) and the container's environment.

:func:`launch_spec` turns a container of a pod into the argv, env and cwd of a local process, as a
container runtime would: env from ``value`` / ``valueFrom`` (secretKeyRef, configMapKeyRef, fieldRef)
/ ``envFrom``, ``$(VAR)`` expansion in command/args/env, then the mapping's own env. :func:`pull_error` says
whether a registry would serve the image (a rule's ``pull``), in containerd's words when it would not.
"""

from __future__ import annotations

import base64
import fnmatch
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.kubelet.rest import JSON, ApiError, Rest
from sglang_operator.sglang import catalog
from sglang_operator.sglang.versions import SGLangVersionError, parse_image_tag

REPO = Path(__file__).resolve().parents[2]
PYTHONPATH = os.pathsep.join(str(REPO / d) for d in ("operator", "sim", "tools", ""))
"""The pods' ``PYTHONPATH``: this checkout's packages (operator, simulator, tools) and its root, ahead of any
installed copy (a venv's editable install may point at another checkout)."""
_VERSION = re.compile(r"(\d+\.\d+\.\d+(?:\.post\d+)?)")
_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


@dataclass(frozen=True)
class ImageRule:
    match: str
    command: list[str]
    append_container_argv: bool
    env: dict[str, str]
    pull: str = ""
    """Which references a registry would serve (:data:`PULL_CHECKS`; "" : every one)."""


PULL_CHECKS = ("sglang-releases",)
"""Values of a rule's ``pull``: ``sglang-releases``, the tag names a release of the operator's flag tables."""


def load_rules(path: Path) -> list[ImageRule]:
    """Parse ``images.yaml``; raises ValueError on a malformed entry."""
    data = yaml.safe_load(path.read_text())
    rules = []
    for i, e in enumerate(data.get("images", [])):
        if not isinstance(e.get("match"), str) or not isinstance(e.get("command"), list):
            raise ValueError(f"{path}: images[{i}] needs `match` (string) and `command` (list)")
        pull = str(e.get("pull") or "")
        if pull and pull not in PULL_CHECKS:
            raise ValueError(f"{path}: images[{i}].pull is {pull!r}; known: {', '.join(PULL_CHECKS)}")
        rules.append(ImageRule(e["match"], [str(a) for a in e["command"]],
                               bool(e.get("append_container_argv", False)),
                               {str(k): str(v) for k, v in (e.get("env") or {}).items()}, pull))
    return rules


def find_rule(rules: list[ImageRule], image: str) -> ImageRule:
    """The first rule whose ``match`` matches ``image``; raises LookupError if none does."""
    rule = next((r for r in rules if fnmatch.fnmatchcase(image, r.match)), None)
    if rule is None:
        raise LookupError(f"no entry in images.yaml matches image {image!r}")
    return rule


def canonical_reference(image: str) -> str:
    """The reference as containerd resolves it: ``lmsysorg/sglang:v0.5.10`` → ``docker.io/lmsysorg/sglang:v0.5.10``,
    ``busybox`` → ``docker.io/library/busybox:latest``; a reference naming its registry unchanged."""
    name, at, digest = image.partition("@")
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = "docker.io/library/" + name
    elif "." not in first and ":" not in first and first != "localhost":
        name = "docker.io/" + name
    if not at and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name + at + digest


def _sglang_release_pulls(image: str) -> bool:
    try:
        return catalog.get(parse_image_tag(image)) is not None
    except SGLangVersionError:
        return False


def pull_error(rules: list[ImageRule], image: str) -> str | None:
    """Why pulling ``image`` fails, as the kubelet reports it under ``ErrImagePull`` (containerd's error through
    CRI: ``rpc error: code = NotFound desc = failed to pull and unpack image "docker.io/…": failed to resolve
    reference "docker.io/…": docker.io/…: not found``), or None when it pulls. Only a rule with ``pull`` refuses:
    ``sglang-releases`` pulls a tag whose release (``sglang_operator.sglang.versions.parse_image_tag``) is one of
    the flag tables' releases (``sglang_operator.sglang.catalog``), whatever its suffix (``-cu129``, a digest). An
    image no rule matches pulls (:func:`launch_spec` refuses it)."""
    rule = next((r for r in rules if fnmatch.fnmatchcase(image, r.match)), None)
    if rule is None or not rule.pull or _sglang_release_pulls(image):
        return None
    ref = canonical_reference(image)
    return (f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": '
            f'failed to resolve reference "{ref}": {ref}: not found')


def image_version(image: str) -> str:
    """The X.Y.Z[.postN] version in an image tag (``lmsysorg/sglang:v0.5.10-cu129`` → ``0.5.10``,
    ``v0.4.9.post6-cu126`` → ``0.4.9.post6``), or ""."""
    tag = image.rsplit("/", 1)[-1].partition(":")[2].partition("@")[0]
    m = _VERSION.search(tag)
    return m.group(1) if m else ""


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined variables are replaced, ``$$`` becomes ``$``,
    undefined references stay as written."""
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return _VAR.sub(sub, text)


def _field(pod: JSON, path: str) -> str:
    meta = pod["metadata"]
    simple = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
              "metadata.uid": meta.get("uid"), "spec.nodeName": pod["spec"].get("nodeName"),
              "spec.serviceAccountName": pod["spec"].get("serviceAccountName"),
              "status.podIP": pod.get("status", {}).get("podIP"),
              "status.hostIP": pod.get("status", {}).get("hostIP")}
    if path in simple:
        return str(simple[path] or "")
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return str(meta.get(m.group(1), {}).get(m.group(2), ""))
    return ""


def _ref_data(rest: Rest, ns: str, kind: str, name: str) -> dict[str, str]:
    plural = "secrets" if kind == "secret" else "configmaps"
    obj = rest.get(f"/api/v1/namespaces/{ns}/{plural}/{name}")
    if kind == "secret":
        return {k: base64.b64decode(v).decode(errors="replace") for k, v in (obj.get("data") or {}).items()}
    return dict(obj.get("data") or {})


def container_env(rest: Rest, pod: JSON, container: JSON) -> dict[str, str]:
    """The container's environment; raises ApiError when a non-optional reference is missing."""
    ns = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for src in container.get("envFrom") or []:
        for kind, key in (("configmap", "configMapRef"), ("secret", "secretRef")):
            if key in src:
                try:
                    data = _ref_data(rest, ns, kind, src[key]["name"])
                except ApiError:
                    if src[key].get("optional"):
                        continue
                    raise
                env.update({src.get("prefix", "") + k: v for k, v in data.items()})
    for e in container.get("env") or []:
        if "value" in e or "valueFrom" not in e:
            env[e["name"]] = expand(str(e.get("value", "")), env)
            continue
        vf: dict[str, Any] = e["valueFrom"]
        if "fieldRef" in vf:
            env[e["name"]] = _field(pod, vf["fieldRef"]["fieldPath"])
        for kind, key in (("configmap", "configMapKeyRef"), ("secret", "secretKeyRef")):
            if key in vf:
                ref = vf[key]
                try:
                    env[e["name"]] = _ref_data(rest, ns, kind, ref["name"])[ref["key"]]
                except (ApiError, KeyError):
                    if not ref.get("optional"):
                        raise
    return env


def _resolve(argv0: str) -> str:
    if "/" in argv0:
        return argv0
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return shutil.which(argv0, path=path) or argv0


def launch_spec(rules: list[ImageRule], pod: JSON, container: JSON, env: dict[str, str],
                pod_ip: str, gpu_product: str) -> tuple[list[str], dict[str, str]]:
    """argv and full environment for ``container``; raises LookupError if no rule matches."""
    image = container.get("image", "")
    rule = find_rule(rules, image)
    ports = ",".join(str(p["containerPort"]) for p in container.get("ports") or []
                     if p.get("protocol", "TCP") == "TCP")
    values = {"python": sys.executable, "pod_ip": pod_ip, "ports": ports,
              "gpu_product": gpu_product, "image_version": image_version(image)}
    argv = [a.format_map(values) for a in rule.command]
    argv[0] = _resolve(argv[0])
    if rule.append_container_argv:
        argv += [expand(a, env) for a in (container.get("command") or []) + (container.get("args") or [])]
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/"),
            "PYTHONPATH": PYTHONPATH, "PYTHONUNBUFFERED": "1", "LANG": "C.UTF-8",
            "HOSTNAME": pod["metadata"]["name"]}
    for k in ("E2E_CLUSTER_ID", "XDG_CACHE_HOME", "HF_HOME"):
        if k in os.environ:
            base[k] = os.environ[k]
    full = {**base, **env, **{k: v.format_map(values) for k, v in rule.env.items()}}
    return argv, full
