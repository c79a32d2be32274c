"""Extract SGLang's flag table and metric families from a released wheel, statically (no import).

Used by ``scripts/extract_sglang.py`` to write ``sglang_operator/sglang/data/{flags,metrics}-<v>.json``
and by ``tests/sglang/test_extract.py`` to re-check the committed files against a fresh download.

Public API: :func:`download_wheel`, :func:`build_tables`, :func:`dump_json`.
"""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from sglang_operator.sglang.extract.flags import SERVER_ARGS, extract_flags
from sglang_operator.sglang.extract.metrics import COLLECTOR_MODULE, extract_metrics
from sglang_operator.sglang.extract.static import Unresolved, Wheel

__all__ = ["Unresolved", "build_tables", "download_wheel", "dump_json"]

# Pin the wheel flavour so the result (and its sha256) does not depend on the machine running pip.
_PIP_TARGET = [
    "--only-binary=:all:",
    "--python-version=3.11",
    "--implementation=cp",
    "--abi=cp311",
    "--platform=manylinux_2_34_x86_64",
]


def download_wheel(version: str, dest: Path) -> Path:
    """``pip download --no-deps sglang==<version>`` into ``dest``; returns the wheel path.

    Raises ``subprocess.CalledProcessError`` when pip fails (no network, unknown version) and
    ``FileNotFoundError`` when no wheel appears.
    """
    dest.mkdir(parents=True, exist_ok=True)
    existing = sorted(dest.glob(f"sglang-{version}-*.whl"))
    if not existing:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", *_PIP_TARGET,
             "-d", str(dest), f"sglang=={version}"],
            check=True,
        )
        existing = sorted(dest.glob(f"sglang-{version}-*.whl"))
    if not existing:
        raise FileNotFoundError(f"no sglang-{version} wheel in {dest}")
    return existing[0]


def _prog(wheel: Wheel) -> str:
    """``prog=`` of the ArgumentParser in ``server_args.py:prepare_server_args`` (argparse messages use it)."""
    for node in ast.walk(wheel.module(SERVER_ARGS)):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("ArgumentParser"):
            for kw in node.keywords:
                if kw.arg == "prog" and isinstance(kw.value, ast.Constant):
                    return str(kw.value.value)
    raise Unresolved("prepare_server_args prog")


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted(_jsonable(v) for v in value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise Unresolved(f"not JSON data: {value!r}")


def build_tables(wheel_path: Path, version: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return ``(flags_doc, metrics_doc)`` for one wheel.

    ``flags_doc``: ``sglang_version``, ``wheel``, ``wheel_sha256``, ``source``, ``prog`` and ``flags`` (list
    in argparse registration order; see :func:`sglang_operator.sglang.extract.flags.normalize` for keys).
    ``metrics_doc``: the same header and ``metrics`` sorted by name (see ``extract.metrics``).
    Raises :class:`Unresolved` when the wheel's source uses a construct the static reader does not know.
    """
    sha = hashlib.sha256(wheel_path.read_bytes()).hexdigest()
    with zipfile.ZipFile(wheel_path) as zf:
        wheel = Wheel(zf)
        header = {"sglang_version": version, "wheel": wheel_path.name, "wheel_sha256": sha}
        flags_doc = {
            **header,
            "source": SERVER_ARGS.replace(".", "/") + ".py:ServerArgs.add_cli_args",
            "prog": _prog(wheel),
            "flags": _jsonable(extract_flags(wheel)),
        }
        metrics_doc = {
            **header,
            "source": COLLECTOR_MODULE.replace(".", "/") + ".py",
            "metrics": _jsonable(extract_metrics(wheel)),
        }
    return flags_doc, metrics_doc


def dump_json(doc: dict[str, Any]) -> str:
    """Deterministic JSON text (sorted keys, one-space indent, trailing newline)."""
    return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
