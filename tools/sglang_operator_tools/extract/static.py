"""A small static evaluator over the Python sources inside an SGLang wheel (no import, no exec).

It resolves the constant expressions that SGLang's argument and metric definitions use: literals,
module-level constants (following ``from x import y`` inside the wheel), class attributes
(dataclass / msgspec field defaults, enum members), ``list()/set()/sorted()``, ``+``, ``.keys()``,
comprehensions, and zero-argument helper functions made of imports, assignments, ``if`` and ``return``.
Anything else raises :class:`Unresolved`; callers decide whether that is fatal.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import zipfile
from dataclasses import dataclass, field
from typing import Any


class Unresolved(Exception):
    """An expression the static evaluator cannot reduce to a value."""


@dataclass(frozen=True)
class ClassRef:
    module: str
    node: ast.ClassDef


@dataclass(frozen=True)
class FuncRef:
    module: str
    node: ast.FunctionDef
    name: str


@dataclass(frozen=True)
class ModuleRef:
    module: str


@dataclass(frozen=True)
class EnumMember:
    name: str
    value: Any


@dataclass(frozen=True)
class Opaque:
    """A value known only by its dotted name (e.g. ``argparse.BooleanOptionalAction``)."""

    name: str


# Standard-library constants SGLang's argument definitions use (CPython 3.11 on 64-bit Linux).
_STDLIB_CONSTANTS: dict[str, Any] = {"sys.maxsize": 2**63 - 1, "argparse.SUPPRESS": "==SUPPRESS=="}

_BUILTIN_CALLS = {"list", "set", "tuple", "sorted", "dict", "str", "int", "float", "frozenset", "len"}


@dataclass
class Wheel:
    """Parsed sources of one wheel, keyed by dotted module name."""

    zf: zipfile.ZipFile
    _cache: dict[str, ast.Module] = field(default_factory=dict)

    def has_module(self, module: str) -> bool:
        base = module.replace(".", "/")
        names = set(self.zf.namelist())
        return f"{base}.py" in names or f"{base}/__init__.py" in names

    def module(self, module: str) -> ast.Module:
        if module not in self._cache:
            base = module.replace(".", "/")
            for path in (f"{base}.py", f"{base}/__init__.py"):
                try:
                    src = self.zf.read(path).decode("utf-8-sig")
                except KeyError:
                    continue
                self._cache[module] = ast.parse(src, filename=path)
                break
            else:
                raise Unresolved(f"module {module} not in wheel")
        return self._cache[module]

    def source(self, path: str) -> str:
        return self.zf.read(path).decode("utf-8-sig")


def _abs_module(current: str, node: ast.ImportFrom, is_pkg: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = current.split(".")
    if not is_pkg:
        parts = parts[:-1]
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, node.module] if node.module else parts)


class Evaluator:
    """Evaluate expressions of module ``module`` of ``wheel`` statically."""

    def __init__(self, wheel: Wheel) -> None:
        self.wheel = wheel
        self._depth = 0

    # ---- name resolution -------------------------------------------------------------
    def lookup(self, module: str, name: str) -> Any:
        """The last top-level binding of ``name`` in ``module``."""
        tree = self.wheel.module(module)
        is_pkg = self.wheel.has_module(module + ".__init__") or self._is_pkg(module)
        found: Any = None
        for stmt in tree.body:
            got = self._binding(module, stmt, name, is_pkg)
            if got is not None:
                found = got
        if found is None:
            raise Unresolved(f"{module}.{name}")
        kind, payload = found
        if kind == "expr":
            return self.eval(payload, module, {})
        return payload() if callable(payload) else payload

    def _is_pkg(self, module: str) -> bool:
        return f"{module.replace('.', '/')}/__init__.py" in self.wheel.zf.namelist()

    def _binding(self, module: str, stmt: ast.stmt, name: str, is_pkg: bool) -> tuple[str, Any] | None:
        if isinstance(stmt, ast.Assign):
            for tgt in stmt.targets:
                if isinstance(tgt, ast.Name) and tgt.id == name:
                    return ("expr", stmt.value)
        elif isinstance(stmt, ast.AnnAssign):
            if isinstance(stmt.target, ast.Name) and stmt.target.id == name and stmt.value is not None:
                return ("expr", stmt.value)
        elif isinstance(stmt, ast.ClassDef) and stmt.name == name:
            return ("val", ClassRef(module, stmt))
        elif isinstance(stmt, ast.FunctionDef) and stmt.name == name:
            return ("val", FuncRef(module, stmt, name))
        elif isinstance(stmt, ast.ImportFrom):
            src = _abs_module(module, stmt, is_pkg)
            for alias in stmt.names:
                if alias.name == "*" and src.split(".")[0] == "sglang" and self.wheel.has_module(src):
                    try:  # `from sglang.srt.utils.common import *` (sglang/srt/utils/__init__.py)
                        found = self.lookup(src, name)
                    except Unresolved:
                        continue
                    return ("val", found)
                if (alias.asname or alias.name) == name:
                    sub = f"{src}.{alias.name}"
                    if src.split(".")[0] == "sglang" and self.wheel.has_module(sub):
                        return ("val", ModuleRef(sub))
                    if src.split(".")[0] != "sglang":
                        return ("val", Opaque(f"{src}.{alias.name}"))
                    return ("val", lambda src=src, n=alias.name: self.lookup(src, n))
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if (alias.asname or alias.name.split(".")[0]) == name:
                    return ("val", ModuleRef(alias.name) if alias.asname else Opaque(alias.name))
        elif isinstance(stmt, ast.If | ast.Try):
            # module-level `if TYPE_CHECKING:` / try-imports: take the first branch's binding
            for inner in stmt.body:
                got = self._binding(module, inner, name, is_pkg)
                if got is not None:
                    return got
        return None

    def class_attr(self, cls: ClassRef, name: str) -> Any:
        """A class-body binding: plain assignment or an annotated field default."""
        scope: dict[str, Any] = {}  # names bound earlier in the class body
        for stmt in cls.node.body:
            if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in stmt.targets
            ):
                return self.eval(stmt.value, cls.module, scope)
            if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                with contextlib.suppress(Unresolved):
                    scope[stmt.targets[0].id] = self.eval(stmt.value, cls.module, scope)
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and stmt.target.id == name
            ):
                if stmt.value is None:
                    raise Unresolved(f"{cls.node.name}.{name} has no default")
                return self.field_default(stmt.value, cls.module)
            if isinstance(stmt, ast.ClassDef) and stmt.name == name:
                return ClassRef(cls.module, stmt)
        raise Unresolved(f"{cls.node.name}.{name}")

    def field_default(self, value: ast.expr, module: str) -> Any:
        """Default of a dataclass/msgspec field: ``= x``, ``field(default=x)``, ``field(default_factory=f)``."""
        if isinstance(value, ast.Call) and _callee(value) in {"field", "dataclasses.field", "msgspec.field"}:
            kws = {k.arg: k.value for k in value.keywords}
            if "default" in kws:
                return self.eval(kws["default"], module, {})
            if "default_factory" in kws:
                fac = kws["default_factory"]
                if isinstance(fac, ast.Lambda):
                    return self.eval(fac.body, module, {})
                return self.eval(ast.Call(func=fac, args=[], keywords=[]), module, {})
            raise Unresolved("field() without default")
        return self.eval(value, module, {})

    def enum_members(self, cls: ClassRef) -> list[EnumMember]:
        out = []
        for stmt in cls.node.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                nm = stmt.targets[0].id
                if not nm.startswith("_"):
                    try:
                        val = self.eval(stmt.value, cls.module, {})
                    except Unresolved:
                        val = None
                    out.append(EnumMember(nm, val))
        return out

    # ---- evaluation -------------------------------------------------------------------
    def eval(self, node: ast.expr, module: str, local: dict[str, Any]) -> Any:
        self._depth += 1
        try:
            if self._depth > 60:
                raise Unresolved("recursion")
            return self._eval(node, module, local)
        finally:
            self._depth -= 1

    def _eval(self, node: ast.expr, module: str, local: dict[str, Any]) -> Any:
        def ev(n: ast.expr) -> Any:
            return self.eval(n, module, local)

        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            items: list[Any] = []
            for elt in node.elts:
                if isinstance(elt, ast.Starred):
                    items.extend(self._iter(ev(elt.value)))
                else:
                    items.append(ev(elt))
            if isinstance(node, ast.Tuple):
                return tuple(items)
            return set(items) if isinstance(node, ast.Set) else items
        if isinstance(node, ast.Dict):
            out: dict[Any, Any] = {}
            for k, v in zip(node.keys, node.values, strict=True):
                if k is None:
                    out.update(ev(v))
                    continue
                try:
                    out[ev(k)] = ev(v)
                except Unresolved:
                    out[ev(k)] = Opaque(ast.unparse(v))
            return out
        if isinstance(node, ast.Name):
            if node.id in local:
                return local[node.id]
            if node.id in {"True", "False", "None"}:
                return {"True": True, "False": False, "None": None}[node.id]
            try:
                return self.lookup(module, node.id)
            except Unresolved:
                if node.id in _BUILTIN_CALLS or hasattr(builtins, node.id):
                    return Opaque(node.id)
                raise
        if isinstance(node, ast.Attribute):
            base = ev(node.value)
            return self._attr(base, node.attr)
        if isinstance(node, ast.Subscript):
            base, idx = ev(node.value), ev(node.slice)
            if isinstance(base, list | tuple | dict | str):
                return base[idx]
            raise Unresolved(ast.unparse(node))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp):
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                if isinstance(left, list) and isinstance(right, tuple | set):
                    right = list(right)
                return left + right
            if isinstance(node.op, ast.Mult):
                return left * right
            if isinstance(node.op, ast.Pow):
                return left**right
            if isinstance(node.op, ast.BitOr) and isinstance(left, set | dict):
                return left | right
            raise Unresolved(ast.unparse(node))
        if isinstance(node, ast.ListComp | ast.SetComp) and len(node.generators) == 1:
            gen = node.generators[0]
            if not isinstance(gen.target, ast.Name):
                raise Unresolved(ast.unparse(node))
            res = []
            for item in self._iter(ev(gen.iter)):
                loc = {**local, gen.target.id: item}
                if all(self.eval(c, module, loc) for c in gen.ifs):
                    res.append(self.eval(node.elt, module, loc))
            return res if isinstance(node, ast.ListComp) else set(res)
        if isinstance(node, ast.Call):
            return self._call(node, module, local)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            return _compare(node.ops[0], ev(node.left), ev(node.comparators[0]))
        if isinstance(node, ast.JoinedStr):
            raise Unresolved("f-string")
        raise Unresolved(ast.unparse(node))

    def _attr(self, base: Any, attr: str) -> Any:
        if isinstance(base, ClassRef):
            return self.class_attr(base, attr)
        if isinstance(base, ModuleRef):
            return self.lookup(base.module, attr)
        if isinstance(base, EnumMember):
            return {"name": base.name, "value": base.value}[attr]
        if isinstance(base, Opaque):
            dotted = f"{base.name}.{attr}"
            return _STDLIB_CONSTANTS.get(dotted, Opaque(dotted))
        if isinstance(base, dict | str | list) and hasattr(base, attr):
            return ("method", base, attr)
        raise Unresolved(f"attribute {attr} of {base!r}")

    def _iter(self, value: Any) -> list[Any]:
        if isinstance(value, ClassRef):
            return list(self.enum_members(value))
        if isinstance(value, dict):
            return list(value)
        if isinstance(value, list | tuple | set | frozenset | str):
            return list(value)
        raise Unresolved(f"iterate {value!r}")

    def _call(self, node: ast.Call, module: str, local: dict[str, Any]) -> Any:
        fn = self.eval(node.func, module, local)
        args = [self.eval(a, module, local) for a in node.args]
        if isinstance(fn, tuple) and fn and fn[0] == "method":
            _, obj, name = fn
            if name in {"keys", "values", "items", "lower", "upper", "strip", "copy", "split", "join"}:
                return list(getattr(obj, name)(*args)) if name in {"keys", "values", "items"} else getattr(
                    obj, name
                )(*args)
            raise Unresolved(f"method {name}")
        if isinstance(fn, Opaque) and fn.name in _BUILTIN_CALLS:
            if fn.name == "len":
                return len(args[0])
            if not args:
                return {"list": [], "set": set(), "tuple": (), "dict": {}, "frozenset": frozenset()}.get(fn.name)
            seq = self._iter(args[0]) if fn.name not in {"str", "int", "float"} else args[0]
            return getattr(builtins, fn.name)(seq)
        if isinstance(fn, FuncRef) and not node.args and not node.keywords:
            return self.run_function(fn)
        raise Unresolved(f"call {ast.unparse(node)}")

    def run_function(self, fn: FuncRef) -> Any:
        """Run a zero-argument helper made of imports, assignments, ifs and a return."""
        local: dict[str, Any] = {}
        is_pkg = self._is_pkg(fn.module)
        return self._run_block(fn.node.body, fn.module, local, is_pkg)

    def _run_block(self, body: list[ast.stmt], module: str, local: dict[str, Any], is_pkg: bool) -> Any:
        for stmt in body:
            if isinstance(stmt, ast.Expr):
                continue
            if isinstance(stmt, ast.ImportFrom):
                src = _abs_module(module, stmt, is_pkg)
                for alias in stmt.names:
                    local[alias.asname or alias.name] = self.lookup(src, alias.name)
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                tgt = stmt.targets[0].id
                v = stmt.value
                # `sys.modules.get(...)`: statically, no optional module is loaded.
                if isinstance(v, ast.Call) and ast.unparse(v.func) == "sys.modules.get":
                    local[tgt] = None
                else:
                    local[tgt] = self.eval(v, module, local)
            elif isinstance(stmt, ast.If):
                branch = stmt.body if self.eval(stmt.test, module, local) else stmt.orelse
                res = self._run_block(branch, module, local, is_pkg)
                if res is not _NO_RETURN:
                    return res
            elif isinstance(stmt, ast.Return):
                return None if stmt.value is None else self.eval(stmt.value, module, local)
            else:
                raise Unresolved(f"statement {type(stmt).__name__}")
        return _NO_RETURN

_NO_RETURN = object()


def _callee(call: ast.Call) -> str:
    return ast.unparse(call.func)



def _compare(op: ast.cmpop, left: Any, right: Any) -> bool:
    if isinstance(op, ast.IsNot):
        return left is not right
    if isinstance(op, ast.Is):
        return left is right
    if isinstance(op, ast.Eq):
        return bool(left == right)
    if isinstance(op, ast.NotEq):
        return bool(left != right)
    if isinstance(op, ast.In):
        return left in right
    raise Unresolved(f"comparison {type(op).__name__}")
