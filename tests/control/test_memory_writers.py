"""Issue 39 item 5: the server's memory is split by concern, each field written from one module
(:data:`sglang_operator.control.memory.WRITERS`).

Reads every module of the operator with ``ast`` and finds each write of a memory field: an assignment (plain,
augmented, annotated, in a tuple, or ``del``) whose target is reached from a memory — ``mem.<field>``,
``memory.<field>``, ``<anything>.<concern>.<field>`` (``seen``, ``reads``, ``hold``), ``self.<field>`` in the classes
of ``control/memory.py`` —, an item or an attribute of the field included (``mem.reads.digests[r] = d``,
``mem.reads.sampling.reads = None``). Each must come from the module :data:`WRITERS` names for that field, and every
field of :class:`ServerMemory` and of its concerns must be named there. Not seen: a mutation through a method of the
field's own value (``mem.reads.sampling.cancel()``, the sampler's own state) — the owner hands that value out.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path

from sglang_operator.control import memory
from sglang_operator.control.memory import WRITERS, Hold, Reads, Seen, ServerMemory

PACKAGE = Path(memory.__file__).resolve().parents[1]
MEMORY_NAMES = {"mem", "memory"}
"""The names the operator gives a :class:`ServerMemory` (a parameter, a local)."""
CONCERNS = {"seen": Seen, "reads": Reads, "hold": Hold}
"""The fields of :class:`ServerMemory` that hold a concern of their own, and its class."""


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE).with_suffix("").parts)


def chain(node: ast.expr) -> tuple[ast.expr, list[str]]:
    """The root of an attribute/item chain and the attribute names from it outwards (items skipped)."""
    names: list[str] = []
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
        node = node.value
    return node, names[::-1]


def field_of(target: ast.expr, self_is: str | None) -> str | None:
    """The memory field a write to ``target`` changes (``seen.body`` for a field of the :class:`Seen` concern), None
    when it is no memory's. ``self_is``: what ``self`` is in the class around it (``mem``, a concern, or None)."""
    root, names = chain(target)
    for at, name in enumerate(names[:-1]):
        if name in CONCERNS:
            return f"{name}.{names[at + 1]}"
    if not names:
        return None
    if isinstance(root, ast.Name) and (root.id in MEMORY_NAMES or (root.id == "self" and self_is == "mem")):
        return names[0]
    if isinstance(root, ast.Name) and root.id == "self" and self_is in CONCERNS:
        return f"{self_is}.{names[0]}"
    return None


def targets(node: ast.AST) -> Iterator[ast.expr]:
    if isinstance(node, ast.Assign):
        pending = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        pending = [node.target]
    elif isinstance(node, ast.Delete):
        pending = list(node.targets)
    else:
        return
    while pending:
        t = pending.pop()
        if isinstance(t, (ast.Tuple, ast.List)):
            pending.extend(t.elts)
        elif isinstance(t, ast.Starred):
            pending.append(t.value)
        else:
            yield t


def writes() -> Iterator[tuple[str, str, int]]:
    """(field, module, line) of every write of a memory field in the operator."""
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        tree = ast.parse(path.read_text(), str(path))
        classes = {"ServerMemory": "mem", **{c.__name__: n for n, c in CONCERNS.items()}} \
            if module == "control.memory" else {}
        self_is: dict[int, str] = {}  # id of a node -> what ``self`` is there
        for cls_node in ast.walk(tree):
            if isinstance(cls_node, ast.ClassDef) and cls_node.name in classes:
                self_is.update({id(node): classes[cls_node.name] for node in ast.walk(cls_node)})
        for node in ast.walk(tree):
            for target in targets(node):
                field = field_of(target, self_is.get(id(node)))
                if field is not None:
                    yield field, module, node.lineno


def test_every_memory_field_has_one_writing_module() -> None:
    declared = {f.name for f in dataclasses.fields(ServerMemory)} - set(CONCERNS)
    declared |= {f"{n}.{f.name}" for n, c in CONCERNS.items() for f in dataclasses.fields(c)}
    assert declared == set(WRITERS), "WRITERS names every field of ServerMemory and its concerns, and no other"
    wrong = [f"{module}:{line} writes {field} (its writer: {WRITERS.get(field, 'none named')})"
             for field, module, line in writes() if WRITERS.get(field) != module]
    assert not wrong, "a memory field written outside its one module:\n" + "\n".join(wrong)


def test_the_check_sees_the_writes_it_names() -> None:
    """The scan finds the owners' own writes (it would pass vacuously otherwise)."""
    found = {(field, module) for field, module, _ in writes()}
    for field in ("seen.body", "seen.stale_rv", "applied", "job", "scaler", "apply_error", "reads.backoff",
                  "reads.digests", "reads.sampling", "hold.spec_hash", "observation", "seen.typed", "uid"):
        assert (field, WRITERS[field]) in found, field


def test_the_field_reading_of_a_target() -> None:
    def parsed(src: str, self_is: str | None = None) -> str | None:
        stmt = ast.parse(src).body[0]
        return field_of(next(targets(stmt)), self_is)

    assert parsed("mem.reads.digests['r'] = 'd'") == "reads.digests"
    assert parsed("mem.reads.sampling.reads = None") == "reads.sampling"
    assert parsed("mem.diffs = []") == "diffs"
    assert parsed("self.memory(body).seen.body = body") == "seen.body"
    assert parsed("memory.apply_failure, memory.apply_failure_reason = None, 'x'") in (
        "apply_failure", "apply_failure_reason")
    assert parsed("self.draining = True", "mem") == "draining"
    assert parsed("self.body = bytearray()") is None  # another class's attribute
