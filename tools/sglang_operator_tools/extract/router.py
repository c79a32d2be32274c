"""Extract the flag table of SGLang's router (the ``smg`` package, Shepherd Model Gateway) from its wheel.

Used by ``scripts/extract_router.py`` to write ``sglang_operator/sglang/data/router-flags.json``.

Unlike SGLang's tables (:mod:`.flags`, a static read), the router's options are read from the parser the wheel
itself builds: ``smg/router_args.py:RouterArgs.add_cli_args`` uses f-string option names (``--{prefix}policy``),
``os.getenv`` defaults and takes the choices of ``--reasoning-parser`` / ``--tool-call-parser`` from the Rust
extension (``smg.smg_rs.get_available_reasoning_parsers``), none of which a static reader can resolve. The wheel
is unpacked into a temporary directory and a child interpreter (its environment emptied, so ``os.getenv`` gives
the defaults) builds the parser exactly as ``smg/launch_router.py:parse_router_args`` does, the parser
``smg launch`` and the image's ``python3 -m smg.launch_router`` entry point use. The records have the shape of
SGLang's (:func:`sglang_operator_tools.extract.flags.normalize`), in registration order, without ``-h``.

Public API: :func:`download_router_wheel`, :func:`build_router_table`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from sglang_operator_tools.extract import sha256_of

__all__ = ["PACKAGE", "build_router_table", "download_router_wheel"]

PACKAGE = "smg"
FLAGS_SOURCE = (
    "smg/router_args.py:RouterArgs.add_cli_args (use_router_prefix=False, as smg/launch_router.py:parse_router_args)"
)

# The wheel is abi3 (cp38-abi3 manylinux_2_17 x86_64): pin the flavour so the sha256 does not depend on the machine.
_PIP_TARGET = [
    "--only-binary=:all:",
    "--python-version=3.11",
    "--implementation=cp",
    "--abi=abi3",
    "--platform=manylinux_2_17_x86_64",
]

# Run inside the unpacked wheel; prints one JSON record per argparse action (help excluded).
_CHILD = r"""
import argparse, json, sys
from smg.router_args import RouterArgs
from smg import smg_rs

parser = argparse.ArgumentParser(prog="smg")
RouterArgs.add_cli_args(parser, use_router_prefix=False)
names = {
    argparse._StoreAction: "store", argparse._StoreTrueAction: "store_true",
    argparse._StoreFalseAction: "store_false", argparse._StoreConstAction: "store_const",
    argparse._AppendAction: "append", argparse._AppendConstAction: "append_const",
    argparse._ExtendAction: "extend", argparse._CountAction: "count",
    argparse.BooleanOptionalAction: "BooleanOptionalAction",
}
exclusive = {}
for group in parser._mutually_exclusive_groups:
    for action in group._group_actions:
        exclusive[action.dest] = [o for a in group._group_actions if a is not action for o in a.option_strings]
out = []
for action in parser._actions:
    if isinstance(action, argparse._HelpAction):
        continue
    kind = names.get(type(action), type(action).__name__)
    typ = action.type
    extra = {"mutually_exclusive_with": exclusive[action.dest]} if action.dest in exclusive else {}
    out.append({
        "options": list(action.option_strings),
        "dest": action.dest,
        "action": kind,
        "type": None if typ is None else getattr(typ, "__name__", repr(typ)),
        "default": action.default,
        "choices": None if action.choices is None else list(action.choices),
        "nargs": 0 if action.nargs == 0 else action.nargs,
        "const": action.const,
        "required": bool(action.required),
        "action_kwargs": extra,
    })
json.dump({"version": smg_rs.get_version_string(), "flags": out}, sys.stdout)
"""


def download_router_wheel(version: str, dest: Path) -> Path:
    """``pip download --no-deps smg==<version>`` into ``dest`` (reused when already there); the wheel path.

    Raises ``subprocess.CalledProcessError`` when pip fails and ``FileNotFoundError`` when no wheel appears.
    """
    dest.mkdir(parents=True, exist_ok=True)
    pattern = f"{PACKAGE}-{version}-*.whl"
    existing = sorted(dest.glob(pattern))
    if not existing:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", *_PIP_TARGET,
             "-d", str(dest), f"{PACKAGE}=={version}"],
            check=True,
        )
        existing = sorted(dest.glob(pattern))
    if not existing:
        raise FileNotFoundError(f"no {pattern} in {dest}")
    return existing[0]


def build_router_table(wheel_path: Path, version: str, generator: str) -> dict[str, Any]:
    """The router's flag table read from its wheel, as the document ``data/router-flags.json`` holds.

    Keys: ``_generator`` (the command that wrote it; first in the file), ``package``, ``version``, ``wheel``,
    ``wheel_sha256``, ``prog`` (``None``: ``parse_router_args`` sets none, so argparse names the program after
    ``sys.argv[0]``: ``smg`` for ``smg launch``, ``launch_router.py`` for the image's
    ``python3 -m smg.launch_router``), ``flags_source``, ``flags``.
    Raises ``RuntimeError`` when the wheel's own version string is not ``smg <version>``.
    """
    with tempfile.TemporaryDirectory(prefix="smg-wheel-") as tmp:
        with zipfile.ZipFile(wheel_path) as zf:
            zf.extractall(tmp)
        proc = subprocess.run(
            [sys.executable, "-E", "-s", "-c", _CHILD],  # `-c` puts the cwd (the unpacked wheel) first on sys.path
            cwd=tmp, env={"PATH": "/usr/bin:/bin", "HOME": tmp},
            check=True, capture_output=True, text=True,
        )
    doc = json.loads(proc.stdout)
    if doc["version"] != f"{PACKAGE} {version}":
        raise RuntimeError(f"{wheel_path.name} reports {doc['version']!r}, not {PACKAGE} {version}")
    return {
        "_generator": generator,  # sorts first in the dumped file: the header names its generator
        "package": PACKAGE,
        "version": version,
        "wheel": wheel_path.name,
        "wheel_sha256": sha256_of(wheel_path),
        "prog": None,
        "flags_source": FLAGS_SOURCE,
        "flags": doc["flags"],
    }
