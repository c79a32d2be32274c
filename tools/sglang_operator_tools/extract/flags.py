"""Static extraction of ``sglang.launch_server``'s argparse options from a wheel.

Three parser eras (see ``/work/shared/sglang/README.md`` §0 for the history):

* 0.4.6–0.5.13: ``sglang/srt/server_args.py:ServerArgs.add_cli_args`` is a list of ``parser.add_argument``
  calls whose defaults are ``ServerArgs.<field>`` dataclass defaults.
* 0.5.14–0.5.19 (the alias era): ``add_cli_args`` first calls
  ``arg_groups/arg_utils.py:add_cli_args_from_dataclass(parser, ServerArgs)``, which derives one option per
  ``A[T, Arg(...)]`` field of the dataclass, then adds a few options (and deprecated aliases) by hand.
* ≥ 0.5.20: the same derivation over the namespaces in ``arg_groups/fields/*.py`` (ordered by
  ``arg_groups/field_order.py:POSITIONAL_FIELD_ORDER``); ``ServerArgs`` is a ``msgspec.Struct``.

The result is one dict per argparse action, in the parser's registration order (argparse's
"ambiguous option" message lists candidates in that order, so the order is data, not noise).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from sglang_operator_tools.extract.static import ClassRef, Evaluator, Opaque, Unresolved, Wheel

SERVER_ARGS = "sglang.srt.server_args"
_MISSING = object()

# argparse's own defaults for the actions SGLang uses (Lib/argparse.py, SGLang's argparse_actions.py).
_ACTION_DEFAULTS: dict[str, dict[str, Any]] = {
    "store_true": {"nargs": 0, "const": True, "default": False},
    "store_false": {"nargs": 0, "const": False, "default": True},
    "store_const": {"nargs": 0},
    "BooleanOptionalAction": {"nargs": 0},
    "DeprecatedAction": {"nargs": 0},
    "DeprecatedStoreTrueAction": {"nargs": 0, "const": True, "default": False},
    "DeprecatedStoreConstAction": {"nargs": 0},
}
_ACTION_KWARGS = ("new_flag", "const_value", "error_message", "raises")
"""SGLang action extras kept in ``action_kwargs``; ``raises`` is the help text a ``DeprecatedAction`` raises as
``ValueError`` in 0.4.6–0.5.7 (``server_args.py:DeprecatedAction.__call__``: ``raise ValueError(self.help)``)."""


def _name_of(value: Any, node: ast.expr | None = None) -> str:
    """Name of a callable used as ``type=``/``action=`` (``json.loads`` → ``loads``)."""
    if node is not None:
        return ast.unparse(node).rsplit(".", 1)[-1]
    if isinstance(value, Opaque):
        return value.name.rsplit(".", 1)[-1]
    if isinstance(value, ClassRef):
        return value.node.name
    if isinstance(value, str):
        return value
    raise Unresolved(f"name of {value!r}")


def normalize(options: list[str], kw: dict[str, Any]) -> dict[str, Any]:
    """Turn ``add_argument(*options, **kw)`` (already evaluated) into one flag record.

    Record keys: ``options`` (list[str]; BooleanOptionalAction adds ``--no-X``), ``dest``, ``action``
    (argparse action string or SGLang action class name), ``type`` (name of the type callable or None),
    ``default``, ``choices`` (list or None), ``nargs`` (None, int, "?", "*", "+"), ``const``,
    ``required`` (bool), ``action_kwargs`` (dict of SGLang action extras).
    """
    action = kw.get("action") or "store"
    opts = list(options)
    if action == "BooleanOptionalAction":
        opts += ["--no-" + o[2:] for o in options if o.startswith("--")]
    dest = kw.get("dest")
    if dest is None:
        longs = [o for o in options if o.startswith("--")] or list(options)
        dest = longs[0].lstrip("-").replace("-", "_")
    base = _ACTION_DEFAULTS.get(action, {})
    choices = kw.get("choices")
    if isinstance(choices, set | frozenset):
        choices = sorted(choices)
    elif choices is not None:
        choices = list(choices)
    default = kw.get("default", base.get("default"))
    return {
        "options": opts,
        "dest": dest,
        "action": action,
        "type": None if kw.get("type") is None else _name_of(kw["type"]),
        "default": default,
        "choices": choices,
        "nargs": kw.get("nargs", base.get("nargs")),
        "const": kw.get("const", base.get("const")),
        "required": bool(kw.get("required", False)),
        "action_kwargs": {k: kw[k] for k in _ACTION_KWARGS if k in kw},
    }


class _CliReader:
    """Reads ``add_argument`` calls of one function body."""

    def __init__(self, ev: Evaluator, module: str, default_of: Callable[[str], Any],
                 deprecated_raises_help: bool = False) -> None:
        self.ev = ev
        self.module = module
        self.default_of = default_of
        self.deprecated_raises_help = deprecated_raises_help
        self.local: dict[str, Any] = {}

    def _default_of(self, node: ast.expr) -> Any:
        # `default=ServerArgs.x` (≤0.5.18) and `default=_declared_default("x")` (≥0.5.20)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "_declared_default":
            arg = node.args[0]
            assert isinstance(arg, ast.Constant)
            return self.default_of(str(arg.value))
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "ServerArgs":
            return self.default_of(node.attr)
        return self.ev.eval(node, self.module, self.local)

    def add_argument(self, call: ast.Call) -> dict[str, Any]:
        options = [self.ev.eval(a, self.module, self.local) for a in call.args]
        kw: dict[str, Any] = {}
        for k in call.keywords:
            if k.arg == "help" and self.deprecated_raises_help and _is_deprecated_action(call):
                kw["raises"] = self.ev.eval(k.value, self.module, self.local)
                continue
            if k.arg in ("help", "metavar"):
                continue
            if k.arg == "type":
                kw["type"] = _name_of(None, k.value)
            elif k.arg == "action":
                val = k.value
                kw["action"] = val.value if isinstance(val, ast.Constant) else _name_of(None, val)
            elif k.arg == "default":
                kw["default"] = self._default_of(k.value)
            else:
                kw[str(k.arg)] = self.ev.eval(k.value, self.module, self.local)
        return normalize(options, kw)

    def run(self, body: list[ast.stmt], out: list[dict[str, Any]], skip_first_call: str | None) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                try:
                    self.local[stmt.targets[0].id] = self.ev.eval(stmt.value, self.module, self.local)
                except Unresolved:
                    self.local[stmt.targets[0].id] = Opaque(ast.unparse(stmt.value))
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                call = stmt.value
                fname = ast.unparse(call.func)
                if fname.endswith(".add_argument"):
                    out.append(self.add_argument(call))
                elif fname == skip_first_call or fname.endswith(".add") or isinstance(stmt.value, ast.Constant):
                    continue
                else:
                    raise Unresolved(f"unexpected call in add_cli_args: {fname}")
            elif isinstance(stmt, ast.If):
                # Env-gated extras (e.g. SGLANG_KV_CANARY_ENABLE_TOKEN_ORACLE): the default env has them off.
                continue
            elif isinstance(stmt, ast.Expr):
                continue
            else:
                raise Unresolved(f"unexpected statement in add_cli_args: {ast.unparse(stmt)[:80]}")


def _is_deprecated_action(call: ast.Call) -> bool:
    return any(k.arg == "action" and ast.unparse(k.value).endswith("DeprecatedAction") for k in call.keywords)


def _deprecated_action_raises_help(tree: ast.Module) -> bool:
    """Whether ``server_args.py:DeprecatedAction.__call__`` is ``raise ValueError(self.help)`` (0.4.6–0.5.7)
    rather than a logged warning (0.5.8 on)."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "DeprecatedAction":
            return "raise ValueError(self.help)" in ast.unparse(node)
    return False


def _find_class(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise Unresolved(f"class {name}")


def _find_method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise Unresolved(f"method {name}")


def extract_flags(wheel: Wheel) -> list[dict[str, Any]]:
    """All options of the wheel's ``ServerArgs.add_cli_args``, in registration order.

    Raises :class:`Unresolved` when the source uses a construct the evaluator does not know.
    """
    ev = Evaluator(wheel)
    tree = wheel.module(SERVER_ARGS)
    cls_node = _find_class(tree, "ServerArgs")
    method = _find_method(cls_node, "add_cli_args")
    out: list[dict[str, Any]] = []
    calls_dataclass = any(
        isinstance(n, ast.Call) and ast.unparse(n.func) == "add_cli_args_from_dataclass"
        for n in ast.walk(method)
    )
    if calls_dataclass:
        from sglang_operator_tools.extract.fields import StructFields

        struct = StructFields(ev, ClassRef(SERVER_ARGS, cls_node))
        out.extend(struct.flags())
        reader = _CliReader(ev, SERVER_ARGS, struct.default_of)
        reader.run(method.body, out, skip_first_call="add_cli_args_from_dataclass")
    else:
        cls = ClassRef(SERVER_ARGS, cls_node)
        reader = _CliReader(ev, SERVER_ARGS, lambda name: ev.class_attr(cls, name),
                            deprecated_raises_help=_deprecated_action_raises_help(tree))
        reader.run(method.body, out, skip_first_call=None)
    return out
