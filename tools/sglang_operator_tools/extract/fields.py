"""Static port of ``sglang/srt/arg_groups/arg_utils.py:add_cli_args_from_dataclass`` (SGLang ≥ 0.5.14).

Two layouts feed it (``/work/shared/sglang/README.md`` §0):

* 0.5.14–0.5.19 (the alias era): ``ServerArgs`` is still one ``@dataclass`` in ``sglang/srt/server_args.py``;
  its fields ``name: A[T, "help" | Arg(...)] = default`` are walked in class-body order
  (``dataclasses.fields``), fields without ``A[...]`` metadata are registered by hand in ``add_cli_args``.
* ≥ 0.5.20: ``ServerArgs`` is a ``msgspec.Struct`` assembled from the namespace classes listed in
  ``sglang/srt/server_args.py:_INPUT_NAMESPACES`` (``arg_groups/fields/*.py``), ordered by
  ``arg_groups/field_order.py:POSITIONAL_FIELD_ORDER``.

Each field becomes one argparse option. This module replays that derivation on the AST.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from sglang_operator_tools.extract.flags import SERVER_ARGS, _name_of, normalize
from sglang_operator_tools.extract.static import ClassRef, Evaluator, Unresolved

_MISSING = object()
_ORDER_MODULE = "sglang.srt.arg_groups.field_order"


@dataclass
class _Field:
    name: str
    module: str
    annotation: ast.expr
    default: Any


def _subscript(node: ast.expr) -> tuple[str, list[ast.expr]] | None:
    """``X[a, b]`` → ("X", [a, b]) with ``typing.X`` shortened to ``X``."""
    if not isinstance(node, ast.Subscript):
        return None
    head = ast.unparse(node.value).rsplit(".", 1)[-1]
    sl = node.slice
    return head, list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]


def _unwrap_optional(node: ast.expr) -> ast.expr:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        parts = [p for p in (node.left, node.right) if ast.unparse(p) != "None"]
        return parts[0] if len(parts) == 1 else node
    sub = _subscript(node)
    if sub and sub[0] == "Optional":
        return sub[1][0]
    if sub and sub[0] == "Union":
        parts = [p for p in sub[1] if ast.unparse(p) != "None"]
        return parts[0] if len(parts) == 1 else node
    return node


def _infer_type(node: ast.expr | type) -> str:
    """``arg_utils._infer_type_func``: str/int/float map to themselves, anything else to str."""
    name = node.__name__ if isinstance(node, type) else ast.unparse(node)
    return name if name in ("str", "int", "float") else "str"


class StructFields:
    """The CLI-visible fields of the ``ServerArgs`` of one wheel (the dataclass itself before 0.5.20, the
    msgspec namespaces from 0.5.20)."""

    def __init__(self, ev: Evaluator, server_args: ClassRef) -> None:
        self.ev = ev
        try:
            namespaces = ev.lookup(SERVER_ARGS, "_INPUT_NAMESPACES")
            order = ev.lookup(_ORDER_MODULE, "POSITIONAL_FIELD_ORDER")
        except Unresolved:  # 0.5.14-0.5.19: the dataclass, in class-body order
            namespaces, order = [server_args], []
        fields: dict[str, _Field] = {}
        for cls in namespaces:
            if not isinstance(cls, ClassRef):
                raise Unresolved(f"namespace {cls!r}")
            for stmt in cls.node.body:
                if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
                    continue
                if ast.unparse(stmt.annotation).startswith(("ClassVar", "typing.ClassVar")):
                    continue
                default = _MISSING if stmt.value is None else ev.field_default(stmt.value, cls.module)
                fields[stmt.target.id] = _Field(stmt.target.id, cls.module, stmt.annotation, default)
        known = [n for n in order if n in fields]
        rest = [n for n in fields if n not in set(order)]
        self.fields = {n: fields[n] for n in known + rest}

    def default_of(self, name: str) -> Any:
        """Declared default of field ``name`` (``server_args.py:_declared_default``)."""
        default = self.fields[name].default
        if default is _MISSING:
            raise Unresolved(f"{name} has no default")
        return default

    def _meta(self, f: _Field) -> tuple[ast.expr, dict[str, Any], dict[str, ast.expr]] | None:
        sub = _subscript(f.annotation)
        if not sub or sub[0] not in ("A", "Annotated"):
            return None
        inner, metas = sub[1][0], sub[1][1:]
        for m in metas:
            if isinstance(m, ast.Constant) and isinstance(m.value, str):
                return inner, {}, {}
            if isinstance(m, ast.Call) and ast.unparse(m.func).rsplit(".", 1)[-1] == "Arg":
                values: dict[str, Any] = {}
                nodes: dict[str, ast.expr] = {}
                for kw in m.keywords:
                    if kw.arg in (None, "help"):
                        continue
                    nodes[kw.arg] = kw.value
                    if kw.arg not in ("type_parser", "action"):
                        values[kw.arg] = self.ev.eval(kw.value, f.module, {})
                return inner, values, nodes
            if isinstance(m, ast.JoinedStr | ast.BinOp):  # help built from pieces
                return inner, {}, {}
        return None

    def flags(self) -> list[dict[str, Any]]:
        """One flag record per CLI field, as ``add_cli_args_from_dataclass`` registers them."""
        out = []
        for f in self.fields.values():
            meta = self._meta(f)
            if meta is None:
                continue
            inner, arg, nodes = meta
            if arg.get("no_cli"):
                continue
            cli_name = arg.get("cli_name") or "--" + f.name.replace("_", "-")
            names = [cli_name, *(arg.get("aliases") or [])]
            kw: dict[str, Any] = {}
            if cli_name.lstrip("-").replace("-", "_") != f.name:
                kw["dest"] = f.name
            if f.default is not _MISSING:
                kw["default"] = f.default
            type_parser = _name_of(None, nodes["type_parser"]) if "type_parser" in nodes else None
            if "action" in nodes:
                act = nodes["action"]
                kw["action"] = act.value if isinstance(act, ast.Constant) else _name_of(None, act)
                kw.update(arg.get("action_kwargs") or {})
                out.append(normalize(names, kw))
                continue
            inner = _unwrap_optional(inner)
            sub = _subscript(inner)
            if sub and sub[0] == "Literal":
                lits = [self.ev.eval(x, f.module, {}) for x in sub[1]]
                kw["choices"] = arg.get("choices") or lits
                kw["type"] = type_parser or _infer_type(type(lits[0]) if lits else str)
            elif sub and sub[0] in ("List", "list") and type_parser is None:
                kw["type"] = _infer_type(sub[1][0])
                kw["nargs"] = arg.get("nargs") or "+"
                if arg.get("choices"):
                    kw["choices"] = arg["choices"]
            elif ast.unparse(inner) == "bool":
                kw["action"] = "store_true"
            else:
                kw["type"] = type_parser or _infer_type(inner)
                if arg.get("choices"):
                    kw["choices"] = arg["choices"]
                if arg.get("nargs"):
                    kw["nargs"] = arg["nargs"]
                required = arg.get("required")
                if required is True or (required is None and f.default is _MISSING):
                    kw["required"] = True
            if arg.get("const") is not None and kw.get("action") != "store_true":
                kw["const"] = arg["const"]
            out.append(normalize(names, kw))
        return out
