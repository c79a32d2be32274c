"""Static extraction of a release's dialect (how to start it and talk to it) from its wheel.

Facts read, each from the file SGLang keeps it in:

- ``routes``: which of :data:`ROUTES` ``sglang/srt/entrypoints/http_server.py`` registers (``@app.get(path)``,
  ``@app.api_route(path, ...)``, ``@app.post(path)``): ``/ready`` from 0.5.20, ``/server_info`` and
  ``/model_info`` from 0.5.6 (before: only ``/get_server_info`` and ``/get_model_info``).
- ``serve_cli``: the wheel declares the console script ``sglang = sglang.cli.main:main`` and
  ``sglang/cli/main.py`` registers a ``serve`` subcommand (0.5.5 on).
- ``recommends_serve``: ``sglang/launch_server.py`` warns that ``sglang serve`` is the recommended entry point
  (0.5.10 on); the operator then renders ``sglang serve``, else ``python3 -m sglang.launch_server``.
- ``spec_v2_env``: the declaration of ``SGLANG_ENABLE_SPEC_V2`` in ``sglang/srt/environ.py``
  (``"EnvBool(False)"`` 0.5.4.post1–0.5.10, ``"EnvBool(True)"`` 0.5.11–0.5.13), ``"removed-warns"`` when the
  variable is gone but SGLang still warns about it (0.5.14–0.5.20), else ``None``.
"""

from __future__ import annotations

import ast
from typing import Any

from sglang_operator_tools.extract.static import Wheel

HTTP_SERVER = "sglang/srt/entrypoints/http_server.py"
ROUTES = ("/health", "/health_generate", "/ready", "/server_info", "/get_server_info", "/model_info",
          "/get_model_info", "/v1/models")
"""The routes the operator or the simulator cares about (probes and read-back)."""
_SPEC_V2_REMOVED = "SGLANG_ENABLE_SPEC_V2 has been removed"


def _routes(wheel: Wheel) -> list[str]:
    tree = ast.parse(wheel.source(HTTP_SERVER))
    found = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
            continue
        is_route = node.func.attr in ("get", "post", "api_route", "route", "add_api_route") and ast.unparse(
            node.func.value) in ("app", "router")
        if is_route and isinstance(node.args[0], ast.Constant) and node.args[0].value in ROUTES:
            found.add(str(node.args[0].value))
    return sorted(found)


def _serve_cli(wheel: Wheel) -> bool:
    names = wheel.zf.namelist()
    entry = next((n for n in names if n.endswith(".dist-info/entry_points.txt")), None)
    if entry is None or "sglang/cli/main.py" not in names:
        return False
    scripts = wheel.source(entry)
    return "sglang = sglang.cli.main:main" in scripts and '"serve"' in wheel.source("sglang/cli/main.py")


def _recommends_serve(wheel: Wheel) -> bool:
    try:
        return "'sglang serve' is the recommended entrypoint" in wheel.source("sglang/launch_server.py")
    except KeyError:
        return False


def _spec_v2_env(wheel: Wheel) -> str | None:
    try:
        tree = ast.parse(wheel.source("sglang/srt/environ.py"))
    except KeyError:
        tree = None
    if tree is not None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == "SGLANG_ENABLE_SPEC_V2" for t in targets) and node.value:
                    return ast.unparse(node.value)
    for name in wheel.zf.namelist():
        if name.startswith("sglang/srt/") and name.endswith(".py") and _SPEC_V2_REMOVED in wheel.source(name):
            return "removed-warns"
    return None


def extract_dialect(wheel: Wheel) -> dict[str, Any]:
    """``{"routes": [...], "serve_cli": bool, "recommends_serve": bool, "spec_v2_env": str | None}``."""
    return {
        "routes": _routes(wheel),
        "serve_cli": _serve_cli(wheel),
        "recommends_serve": _recommends_serve(wheel),
        "spec_v2_env": _spec_v2_env(wheel),
    }
