"""No side door to the Kubernetes write side (issue 39 item 3): the operator's process-wide client
(``sglang_operator.io._client``) writes only in the io modules that write (``io/kube_write.py``, ``io/revisions.py``),
each write there only inside a function marked ``dispatched(..., fence=...)`` (whose wrapper checks the fence, for the
cluster and the offline tests' fake alike) or a helper only such functions call; and no other module writes with a
lightkube client of its own, but the few that have one for a reason (:data:`OWN_CLIENTS`).

Read from the source with ``ast``, not grepped: the client is followed through imports (``from ... import x as y``,
a module imported whole, a name re-exported by another module: ``kube._client.client()``), local names and ``self``
attributes it is stored in, and the functions that return it, whatever they are called. The import-linter contract
``client`` (``.importlinter``) forbids the import of the private module itself."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import sglang_operator

PACKAGE = "sglang_operator"
PRIVATE = "sglang_operator.io._client"
WRITERS = {PRIVATE, "sglang_operator.io.kube_write", "sglang_operator.io.revisions"}
"""The modules that may call a write method of the private client (io/kube.py, which imports it too, only reads)."""
OWN_CLIENTS = {
    "sglang_operator.process.leader": "the Lease of leader election (never fenced: it is the fence)",
    "sglang_operator.io.reviews": "TokenReview and SubjectAccessReview for /metrics: answers, nothing is stored",
    "sglang_operator.plugin": "kubectl sglang: the user's own client, in a process of its own",
}
"""Modules (and packages) that may write with a lightkube client they make themselves, and why."""
CLIENT_CLASSES = {"lightkube.AsyncClient", "lightkube.Client", "lightkube.core.async_client.AsyncClient",
                  "lightkube.core.client.Client", "lightkube.core.generic_client.GenericAsyncClient",
                  "lightkube.core.generic_client.GenericSyncClient"}
WRITE_METHODS = {"patch", "apply", "create", "delete", "replace", "delete_collection", "deletecollection", "request",
                 "send"}
DISPATCHED = "sglang_operator.io.api.dispatched"
Origin = frozenset[str]
PRIVATE_ORIGIN: Origin = frozenset({"private"})
OWN_ORIGIN: Origin = frozenset({"own"})


@dataclass
class Module:
    name: str
    tree: ast.Module
    bindings: dict[str, str] = field(default_factory=dict)
    """Imported names (anywhere in the module) -> the dotted name they stand for."""
    imports: set[str] = field(default_factory=set)
    """What the module imports: each ``import a.b`` as ``a.b``, each ``from a import b`` as ``a.b``."""
    defs: set[str] = field(default_factory=set)
    """Module-level functions and classes."""
    names: dict[str, Origin] = field(default_factory=dict)
    """Variables (module-wide, flow-insensitive) that hold a client, and whose client it is."""
    self_attrs: dict[str, Origin] = field(default_factory=dict)
    """``self.<attr>`` that holds a client."""
    methods: dict[str, Origin] = field(default_factory=dict)
    """Methods (any class of the module) that return a client: ``self.<method>()``."""
    holders: list[tuple[ast.expr, ast.expr | None, ast.expr | None]] = field(default_factory=list)
    """What may come to hold a client: (target, value, annotation) of assignments, ``with ... as``, parameters."""
    functions: list[tuple[bool, ast.FunctionDef | ast.AsyncFunctionDef, list[ast.Return]]] = \
        field(default_factory=list)
    """(a method?, the function, its own returns) of the module-level functions and the classes' methods."""
    calls: list[tuple[ast.Call, tuple[ast.AST, ...]]] = field(default_factory=list)
    """Calls of a method named as a write (:data:`WRITE_METHODS`), with their enclosing functions."""
    loads: list[tuple[ast.Name | ast.Attribute, tuple[ast.AST, ...], bool]] = field(default_factory=list)
    """Every name and attribute read, with its enclosing functions and whether it is called."""


def _own_client_module(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in OWN_CLIENTS)


class Analysis:
    """Every module of the package, with where a Kubernetes client is held and which functions return one."""

    def __init__(self, sources: Mapping[str, str]) -> None:
        self.modules = {name: Module(name, ast.parse(src)) for name, src in sources.items()}
        self.accessors: dict[str, Origin] = {c: OWN_ORIGIN for c in CLIENT_CLASSES}
        self._dotted: dict[int, str | None] = {}
        for module in self.modules.values():
            self._index(module)
        changed = True
        while changed:
            changed = any([self._taint(m) for m in self.modules.values()])

    # --- names -----------------------------------------------------------------------------------------------

    def _index(self, module: Module) -> None:
        """One walk of ``module``: its imports, and what the checks read of it."""
        package = module.name if self._is_package(module.name) else module.name.rpartition(".")[0]
        called: set[int] = set()
        returns: dict[int, list[ast.Return]] = {}
        classes: list[ast.ClassDef] = []
        for node, stack in _walk(module.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    module.imports.add(alias.name)
                    top = alias.name.split(".")[0]
                    module.bindings[alias.asname or top] = alias.name if alias.asname else top
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
                for alias in node.names:
                    module.bindings[alias.asname or alias.name] = f"{base}.{alias.name}"
                    module.imports.add(f"{base}.{alias.name}")
            elif isinstance(node, ast.Assign):
                module.holders.extend((target, node.value, None) for target in node.targets)
            elif isinstance(node, ast.AnnAssign):
                module.holders.append((node.target, node.value, node.annotation))
            elif isinstance(node, ast.NamedExpr):
                module.holders.append((node.target, node.value, None))
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                module.holders.extend((item.optional_vars, item.context_expr, None) for item in node.items
                                      if item.optional_vars is not None)
            elif isinstance(node, ast.arg):
                module.holders.append((ast.Name(id=node.arg), None, node.annotation))
            elif isinstance(node, ast.ClassDef):
                classes.append(node)
            elif isinstance(node, ast.Return) and stack:
                returns.setdefault(id(stack[-1]), []).append(node)
            elif isinstance(node, ast.Call):
                called.add(id(node.func))
                if isinstance(node.func, ast.Attribute) and node.func.attr in WRITE_METHODS:
                    module.calls.append((node, stack))
            if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
                module.loads.append((node, stack, id(node) in called))
        for owner, method in [(c.body, True) for c in classes] + [(module.tree.body, False)]:
            for fn in owner:
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    module.functions.append((method, fn, returns.get(id(fn), [])))
                    if not method:
                        module.defs.add(fn.name)
                elif isinstance(fn, ast.ClassDef) and not method:
                    module.defs.add(fn.name)

    def _is_package(self, name: str) -> bool:
        return any(other.startswith(name + ".") for other in self.modules)

    def canonical(self, dotted: str, depth: int = 0) -> str:
        """``dotted`` with every name a module of the package imported replaced by what it stands for
        (``sglang_operator.io.kube._client.client`` -> ``sglang_operator.io._client.client``)."""
        parts = dotted.split(".")
        for i in range(len(parts) - 1, 0, -1):
            owner = self.modules.get(".".join(parts[:i]))
            if owner is None:
                continue
            attr = parts[i]
            target = owner.bindings.get(attr)
            if target is None or attr in owner.defs or depth > 20:
                return dotted
            return self.canonical(".".join([target, *parts[i + 1:]]), depth + 1)
        return dotted

    def dotted(self, module: Module, node: ast.expr) -> str | None:
        """The canonical dotted name ``node`` (a name or an attribute chain) stands for in ``module``."""
        if id(node) not in self._dotted:
            self._dotted[id(node)] = self._resolve(module, node)
        return self._dotted[id(node)]

    def _resolve(self, module: Module, node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            if node.id in module.bindings:
                return self.canonical(module.bindings[node.id])
            if node.id in module.defs:
                return f"{module.name}.{node.id}"
            return None
        if isinstance(node, ast.Attribute):
            base = self.dotted(module, node.value)
            return self.canonical(f"{base}.{node.attr}") if base else None
        return None

    # --- the client ------------------------------------------------------------------------------------------

    def client(self, module: Module, node: ast.AST | None) -> Origin:
        """Whose client ``node`` holds in ``module`` (empty: none): ``private`` (the operator's process-wide one),
        ``own`` (a lightkube client the module made)."""
        if node is None:
            return frozenset()
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
                return module.methods.get(func.attr, frozenset())
            name = self.dotted(module, func) if isinstance(func, (ast.Name, ast.Attribute)) else None
            origin = self.accessors.get(name or "", frozenset())
            if name in CLIENT_CLASSES and module.name == PRIVATE:
                return PRIVATE_ORIGIN
            return origin
        if isinstance(node, ast.Name):
            if node.id in module.names:
                return module.names[node.id]
            return self._global(module, node)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in module.self_attrs:
                return module.self_attrs[node.attr]
            inner = self.client(module, node.value)
            return inner if inner else self._global(module, node)
        if isinstance(node, (ast.Await, ast.NamedExpr)):
            return self.client(module, node.value)
        if isinstance(node, ast.IfExp):
            return self.client(module, node.body) | self.client(module, node.orelse)
        if isinstance(node, ast.BoolOp):
            return frozenset().union(*(self.client(module, v) for v in node.values))
        return frozenset()

    def _global(self, module: Module, node: ast.expr) -> Origin:
        """A module-level variable of another module (or this one, through an import) that holds a client."""
        name = self.dotted(module, node)
        if not name:
            return frozenset()
        owner, _, attr = name.rpartition(".")
        held = self.modules.get(owner)
        return held.names.get(attr, frozenset()) if held else frozenset()

    def _annotated(self, module: Module, annotation: ast.expr | None) -> Origin:
        if annotation is None:
            return frozenset()
        for node in ast.walk(annotation):
            if isinstance(node, (ast.Name, ast.Attribute)) and self.dotted(module, node) in CLIENT_CLASSES:
                return PRIVATE_ORIGIN if module.name == PRIVATE else OWN_ORIGIN
        return frozenset()

    def _taint(self, module: Module) -> bool:
        """One pass over ``module``: what holds a client and what returns one. True when anything was added."""
        before = (dict(module.names), dict(module.self_attrs), dict(module.methods), dict(self.accessors))

        def hold(target: ast.expr, origin: Origin) -> None:
            if not origin:
                return
            if isinstance(target, ast.Name):
                module.names[target.id] = module.names.get(target.id, frozenset()) | origin
            elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                    and target.value.id == "self":
                module.self_attrs[target.attr] = module.self_attrs.get(target.attr, frozenset()) | origin
            elif isinstance(target, (ast.Tuple, ast.List)):
                for element in target.elts:
                    hold(element, origin)

        for target, value, annotation in module.holders:
            hold(target, self.client(module, value) | self._annotated(module, annotation))
        for method, fn, returns in module.functions:
            origin = self._annotated(module, fn.returns)
            for ret in returns:
                origin |= self.client(module, ret.value)
            if not origin:
                continue
            origin = PRIVATE_ORIGIN if module.name == PRIVATE else origin
            if method:
                module.methods[fn.name] = module.methods.get(fn.name, frozenset()) | origin
            else:
                key = f"{module.name}.{fn.name}"
                self.accessors[key] = self.accessors.get(key, frozenset()) | origin
        return before != (module.names, module.self_attrs, module.methods, self.accessors)

    # --- the checks ------------------------------------------------------------------------------------------

    def writes(self) -> Iterator[tuple[Module, ast.Call, Origin, tuple[ast.AST, ...]]]:
        """Every call of a write method on a client: (module, call, whose client, the enclosing functions)."""
        for module in self.modules.values():
            for call, stack in module.calls:
                assert isinstance(call.func, ast.Attribute)
                origin = self.client(module, call.func.value)
                if origin:
                    yield module, call, origin, stack

    def side_doors(self) -> list[str]:
        """The writes that break the rule, as ``module:line: what``."""
        found = []
        for module, call, origin, _ in self.writes():
            where = f"{module.name}:{call.lineno}: {ast.unparse(call)[:100]}"
            if "private" in origin and module.name not in WRITERS:
                found.append(f"{where} (the operator's process-wide client, outside the io writers)")
            if "own" in origin and not _own_client_module(module.name):
                found.append(f"{where} (a lightkube client of its own, outside {sorted(OWN_CLIENTS)})")
        for module in self.modules.values():
            if module.name in WRITERS or module.name == "sglang_operator.io.kube":
                continue
            found.extend(f"{module.name}: imports {target} (the private client; the contract 'client' too)"
                         for target in sorted(module.imports) if target.split(".")[:3] == PRIVATE.split("."))
            for node in ast.walk(module.tree):
                if isinstance(node, ast.Call) and any(isinstance(a, ast.Constant) and a.value == PRIVATE
                                                      for a in node.args):
                    found.append(f"{module.name}:{node.lineno}: {ast.unparse(node)} (imports the private client)")
        return found

    def unfenced(self) -> list[str]:
        """The writes of the private client not behind a fenced dispatch, as ``module:line: what``."""
        found = []
        for module, call, origin, stack in self.writes():
            if "private" in origin and not self._fenced(module, stack, set()):
                found.append(f"{module.name}:{call.lineno}: {ast.unparse(call)[:100]}")
        return found

    def _fenced(self, module: Module, stack: tuple[ast.AST, ...], seen: set[str]) -> bool:
        """Whether code in the functions ``stack`` (innermost last) of ``module`` runs only behind the fence: one of
        them is marked ``dispatched(..., fence=...)``, or the outermost is a module-level function every reference
        to which is a call from such code."""
        if not stack:
            return False
        if any(self._fence_mark(module, fn) for fn in stack):
            return True
        outer = stack[0]
        if not isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef)) or outer not in module.tree.body:
            return False
        target = f"{module.name}.{outer.name}"
        if target in seen:
            return False
        seen.add(target)
        references = list(self._references(target))
        return bool(references) and all(called and self._fenced(m, s, seen) for m, s, called in references)

    def _fence_mark(self, module: Module, fn: ast.AST) -> bool:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        return any(isinstance(d, ast.Call) and self.dotted(module, d.func) == DISPATCHED
                   and any(k.arg == "fence" and not (isinstance(k.value, ast.Constant) and k.value.value is None)
                           for k in d.keywords)
                   for d in fn.decorator_list)

    def _references(self, target: str) -> Iterator[tuple[Module, tuple[ast.AST, ...], bool]]:
        """Every use of function ``target`` in the package: (module, enclosing functions, whether it is called)."""
        for module in self.modules.values():
            for node, stack, called in module.loads:
                if self.dotted(module, node) == target:
                    yield module, stack, called


def _walk(tree: ast.AST) -> Iterator[tuple[ast.AST, tuple[ast.AST, ...]]]:
    """Every node, parents first, with the functions that enclose it, outermost first."""
    todo: list[tuple[ast.AST, tuple[ast.AST, ...]]] = [(tree, ())]
    while todo:
        node, stack = todo.pop()
        if node is not tree:
            yield node, stack
        inner = (*stack, node) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else stack
        todo.extend((child, inner) for child in reversed(list(ast.iter_child_nodes(node))))


def package_sources() -> dict[str, str]:
    root = Path(sglang_operator.__file__).parent
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path.read_text()
    return out


@functools.cache
def _package() -> Analysis:
    return Analysis(package_sources())


def test_no_module_writes_with_a_kubernetes_client_outside_the_io_writers() -> None:
    analysis = _package()
    assert analysis.side_doors() == []
    writers = {m.name for m, _, origin, _ in analysis.writes() if "private" in origin}
    assert writers == WRITERS  # the check sees the writes it allows (a blind analysis would pass anything)


def test_every_write_of_the_private_client_is_behind_a_fenced_dispatch() -> None:
    analysis = _package()
    assert analysis.unfenced() == []


# --- the check itself, on a package with a side door ------------------------------------------------------------

_PRIVATE_SRC = '''
from lightkube import AsyncClient
_client: AsyncClient | None = None
def client() -> AsyncClient:
    global _client
    if _client is None:
        _client = AsyncClient()
    return _client
def renamed():
    return client()
'''
_KUBE_SRC = "from sglang_operator.io import _client\nasync def get(n):\n    return await _client.client().get(n)\n"
_API_SRC = "def dispatched(name, fence=None, quiet=False):\n    return lambda fn: fn\n"
_WRITE_SRC = '''
from sglang_operator.io import _client
from sglang_operator.io.api import dispatched
async def _helper(x):
    await _client.client().patch(x)
@dispatched("apply", fence="apply")
async def apply(x):
    await _client.client().patch(x)
    await _helper(x)
@dispatched("unfenced")
async def unfenced(x):
    await _client.client().delete(x)
'''


def _with(control: str) -> Analysis:
    return Analysis({"sglang_operator": "", "sglang_operator.io": "", "sglang_operator.control": "",
                     PRIVATE: _PRIVATE_SRC, "sglang_operator.io.kube": _KUBE_SRC,
                     "sglang_operator.io.api": _API_SRC, "sglang_operator.io.kube_write": _WRITE_SRC,
                     "sglang_operator.control.tuning": control})


def test_the_check_finds_a_client_write_however_the_client_is_reached() -> None:
    doors = {
        "the accessor": "from sglang_operator.io._client import client\nasync def f():\n"
                        "    await client().patch('x')\n",
        "an alias": "from sglang_operator.io._client import renamed as c\nasync def f():\n    await c().apply('x')\n",
        "through kube's import": "from sglang_operator.io import kube\nasync def f():\n"
                                 "    await kube._client.client().create('x')\n",
        "a local": "from sglang_operator.io import _client as p\nasync def f():\n    k = p.client()\n"
                   "    await k.delete('x')\n",
        "the global": "import sglang_operator.io._client as p\nasync def f():\n    await p._client.replace('x')\n",
        "the module's full name": "import sglang_operator.io._client\nasync def f():\n"
                                  "    await sglang_operator.io._client.client().patch('x')\n",
        "a self attribute": "from sglang_operator.io import _client\nclass A:\n    def __init__(self):\n"
                            "        self.k = _client.client()\n"
                            "    async def f(self):\n        await self.k.patch(1)\n",
        "a client of its own": "from lightkube import AsyncClient\nasync def f():\n"
                               "    async with AsyncClient() as k:\n        await k.patch('x')\n",
        "an annotated parameter": "import lightkube\nasync def f(k: lightkube.AsyncClient):\n"
                                  "    await k.delete_collection('x')\n",
    }
    for what, source in doors.items():
        found = _with(source).side_doors()
        writes = [f for f in found if " imports " not in f]
        imports = [f for f in found if " imports " in f]
        assert len(writes) == 1 and writes[0].startswith("sglang_operator.control.tuning:"), (what, found)
        assert len(imports) == ("_client" in source.split("\n")[0]), (what, found)
    assert _with("async def f(k):\n    await k.patch('x')\n").side_doors() == []  # no client: an HTTP one, say


def test_the_check_finds_a_write_not_behind_a_fenced_dispatch() -> None:
    found = _with("").unfenced()
    assert len(found) == 1 and "delete" in found[0], found
