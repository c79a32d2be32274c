"""Extract SGLang's flag tables, metric families and dialect from released wheels, statically (no import).

Used by ``scripts/extract_sglang.py`` to write ``sglang_operator/sglang/data/{releases,flags,metrics}.json``
(:mod:`.store` encodes them compactly) and by ``tests/sglang/test_extract.py`` to re-check the committed data
against freshly downloaded wheels.

Public API: :func:`download_wheel`, :func:`build_release`, :func:`sha256_of`.
"""

from __future__ import annotations

import ast
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from sglang_operator_tools.extract.dialect import extract_dialect
from sglang_operator_tools.extract.flags import SERVER_ARGS, extract_flags
from sglang_operator_tools.extract.metrics import collector_module, extract_metrics
from sglang_operator_tools.extract.static import Unresolved, Wheel

__all__ = ["Unresolved", "build_release", "download_wheel", "sha256_of"]

# Pin the wheel flavour so the result (and its sha256) does not depend on the machine running pip
# (0.4.6-0.5.10 are pure ``py3-none-any`` wheels; from 0.5.11 SGLang ships ``cp311`` manylinux wheels).
_PIP_TARGET = [
    "--only-binary=:all:",
    "--python-version=3.11",
    "--implementation=cp",
    "--abi=cp311",
    "--platform=manylinux_2_34_x86_64",
]


def download_wheel(version: str, dest: Path) -> Path:
    """``pip download --no-deps sglang==<version>`` into ``dest`` (reused when already there); the wheel path.

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


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _prog(wheel: Wheel) -> str | None:
    """``prog=`` of the ArgumentParser in ``server_args.py:prepare_server_args`` (argparse messages use it), or
    ``None`` when the release sets none (before 0.5.10): argparse then names the program after ``sys.argv[0]``."""
    for node in ast.walk(wheel.module(SERVER_ARGS)):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("ArgumentParser"):
            for kw in node.keywords:
                if kw.arg == "prog" and isinstance(kw.value, ast.Constant):
                    return str(kw.value.value)
    return None


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


def build_release(wheel_path: Path, version: str) -> dict[str, Any]:
    """Everything the operator keeps about one release, read from its wheel.

    Keys: ``version``, ``wheel`` (file name), ``wheel_sha256``, ``prog`` (``prepare_server_args``' argparse prog,
    ``None`` before 0.5.10), ``flags_source``, ``flags`` (records in argparse registration order; see
    :func:`sglang_operator_tools.extract.flags.normalize`), ``metrics_source``, ``metrics`` (records sorted by
    name; see :mod:`.metrics`), ``dialect`` (see :mod:`.dialect`).
    Raises :class:`Unresolved` when the wheel's source uses a construct the static reader does not know.
    """
    with zipfile.ZipFile(wheel_path) as zf:
        wheel = Wheel(zf)
        fields = wheel.has_module("sglang.srt.arg_groups.fields")
        return {
            "version": version,
            "wheel": wheel_path.name,
            "wheel_sha256": sha256_of(wheel_path),
            "prog": _prog(wheel),
            "flags_source": SERVER_ARGS.replace(".", "/") + ".py:ServerArgs.add_cli_args"
            + (" + sglang/srt/arg_groups/fields/*.py" if fields else ""),
            "flags": _jsonable(extract_flags(wheel)),
            "metrics_source": collector_module(wheel).replace(".", "/") + ".py",
            "metrics": _jsonable(extract_metrics(wheel)),
            "dialect": extract_dialect(wheel),
        }
