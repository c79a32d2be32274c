"""Typed status through ``decisions/``: the stored status is parsed once per tick (``ServerView.status``, an
``SGLangServerStatus``) and only that model crosses ``decisions/``; no decision takes the stored status, or a piece
of it, as a dict to read. A status *patch* being built is a dict (the output), and so are a Pod, a spec, SGLang's
``/server_info``: each such parameter is listed in :data:`ALLOWED` with what it is.

Checked on the source's AST, on what a parameter *is* (its annotation), not on what it is called (renaming would
defeat that):

- every parameter of every function under ``decisions/`` is annotated (else the next rule would not see it);
- a parameter, or a class field, annotated with a JSON object (``Mapping``, ``MutableMapping``, ``dict``, ``Dict``,
  ``MappingProxyType``, ``TypedDict`` with ``Any``/``object`` values or no arguments, anywhere in the annotation:
  ``list[...]``, ``... | None``, ``Iterable[...]``; or an alias of one, ``Condition = dict[str, Any]``, ``FreeForm``,
  resolved over the whole package), with plain ``Any``/``object``, or with ``ServerView`` (it carries the raw
  stored status) is listed in :data:`ALLOWED`, whose every entry still exists;
- no decision reads the view's raw stored status (an attribute ``status_data``);
- ``observation.decide``, ``judging.judge`` and ``observation.held`` take the status as ``SGLangServerStatus``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "sglang_operator"
DECISIONS = PACKAGE / "decisions"

MAPPINGS = frozenset({"Mapping", "MutableMapping", "dict", "Dict", "MappingProxyType", "TypedDict"})
"""Mapping types: annotated with ``Any``/``object`` values (or bare), a JSON object: a status could be one."""
LOOSE = frozenset({"Any", "object"})
"""Annotations that take anything, a status dict too."""
RAW_CARRIERS = frozenset({"ServerView"})
"""Typed objects that carry the raw stored status beside the typed one (``ServerView.status_data``)."""
RAW_ATTRIBUTES = frozenset({"status_data"})
"""Attributes that are the raw stored status."""
TYPED_STATUS = "SGLangServerStatus"
TAKE_TYPED = ("observation:decide", "judging:judge", "observation:held")
"""The functions that take the server's status: as :data:`TYPED_STATUS`."""

POD = "a Kubernetes object as the API serves it: a Pod (or its terminated state), a list of Pods, an owned object"
SPEC = "a server's spec (or a block, or its env list) as stored: what a trial derives from, the hold hashes, the ledger"
SERVER_INFO = ("SGLang's settings: /server_info as answered, or its FIELDS keys as read back (a new read, or "
               "status.effective, which gather reads back the same way to compare with the spec)")
CONDITION = ("a condition (conditions.Condition) being built for this tick's patch, or a list of them merged there "
             "(the stored ones dumped from the typed status)")
PATCH = ("a status patch, or a piece of one, being built: the output (the ledger rewritten from the typed status, "
         "the tick's decided status the autoscaler follows, what the server's job applied, merged whole)")
DIFF = ("JSON merge-patch arithmetic: control/ diffs the stored status against the new one as JSON (the API server "
        "merges JSON); nothing here reads a field of it")
TUNING = "an SGLangTuning object as the API serves it (its status parsed here, typed), or SGLang's HTTP answer body"
SCALAR = ("a value of unknown type: a JSON scalar compared or normalised, a typed status field's value turned into "
          "its JSON, a spec model duck-typed (.parallelism)")
MANIFEST = "a rendered manifest (the ScaledObject to apply: output)"
VIEW = "a ServerView read for its spec (spec_data, server) only: no status_data (checked below)"
OTHER = "not JSON: a cached parser value, pydantic's before-validator input"

ALLOWED: dict[str, frozenset[str]] = {
    POD: frozenset({
        "groups:Group.leader", "groups:Group.workers", "groups:_labels(pod)", "groups:groups(pods)",
        "groups:leader_pods(pods)", "groups:group_health(pods)", "groups:serving_pods(pods)",
        "groups:pod_views(pods)", "groups:server_health(pods)", "groups:serving_health(pods)",
        "owners:controller_ref(obj)", "owners:verdict(pod)",
        "pods:ready_condition(pod)", "pods:is_ready(pod)", "pods:_crash_text(terminated)", "pods:restart_count(pod)",
        "pods:crash_text(pod)", "pods:never_starts(pod)", "pods:_trouble(pod)", "pods:trouble(pod)",
        "pods:pod_health(pods)", "pods:live(pods)", "pods:ready_with_ip(pods)", "pods:first_crash(pods)",
        "pods:first_trouble(pods)",
    }),
    SPEC: frozenset({
        "status:ledger_entry(spec)", "tuning.hold:spec_hash(spec)", "tuning.trialspec:trial_base(server_spec)",
        "tuning.trialspec:trial_spec(server_spec)", "tuning.trialspec:trial_refusal(server_spec)",
        "tuning.trialspec:write_speculative(block)", "tuning.trialspec:write_memory(spec)",
        "tuning.known_best:forced_acceptance(env)", "tuning.lifecycle:forced_refused(env)",
    }),
    SERVER_INFO: frozenset({
        "effective:effective_settings(server_info)", "effective:serves_sglang(server_info)",
        "effective:read_back(settings)", "effective:differences(requested)", "effective:differences(effective)",
        "derive:speculative_condition(effective)", "observation:Observed.effective", "status:observed(effective)",
    }),
    CONDITION: frozenset({
        "conditions:merge(old)", "conditions:merge(new)", "conditions:merge_stored(new)", "conditions:same(a)",
        "conditions:same(b)", "conditions:same.key(cs)", "conditions:same_stored(b)", "conditions:find(conditions)",
        "derive:derive(pod_conditions)", "derive:derive(speculative)",
        "judging:Judged.conditions", "judging:judge(pod_conditions)", "judging:judge(speculative)",
        "observation:Observed.speculative", "observation:Observed.settings", "observation:held(pod_conditions)",
        "observation:Observed.sampling", "observation:held(speculative)", "pods:PodHealth.conditions",
        "autoscaling:with_autoscaling(cond)",
        "tuning.lifecycle:status_body(conditions)",
    }),
    PATCH: frozenset({
        "judging:Judged.status", "observation:ObservationDecision.status_json", "observation:Observed.figures",
        "observation:decide(applied)", "status:summary(analysis)", "status:summary(canary)", "status:bounded(ledger)",
        "status:judged(ledger)", "status:judged(canary_steps)", "status:applied(rendered_status)",
        "status:applied(entry)", "baseline:noted(ledger)", "actions:RecordVerdict.canary_steps",
        "autoscaling:verifying_status(status_json)", "autoscaling:with_autoscaling(autoscaling)",
    }),
    DIFF: frozenset({
        "status:changed(old)", "status:changed(new)", "status:merge_patch(old)", "status:merge_patch(delta)",
        "status:merge_patch.diff(a)", "status:merge_patch.diff(b)",
    }),
    TUNING: frozenset({
        "tuning.inplace:request_of(tuning)", "tuning.known_best:record_of(body)",
        "tuning.windows:step_time_lists(body)",
    }),
    SCALAR: frozenset({
        "effective:_clean(value)", "effective:_norm(value)", "status:_moved(old)", "status:_read(value)",
        "pods:pod_health.cond(s)", "groups:serving_pods(spec)", "groups:pod_views(spec)", "groups:server_health(spec)",
        "groups:serving_health(spec)",
    }),
    MANIFEST: frozenset({"autoscaling:Want.scaled_object", "actions:WriteScaledObject.manifest",
                          "autoscaling:digest(manifest)"}),
    VIEW: frozenset({"tuning.lifecycle:render_trial(server_view)"}),
    OTHER: frozenset({"sampling.cache:SeriesCache.put(value)", "tuning.space:SearchSpace._normalise(data)"}),
}


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def json_like(annotation: ast.expr, aliases: frozenset[str]) -> bool:
    """Whether ``annotation`` names a JSON object anywhere in it (module docstring; ``aliases``: the names of aliases
    of one in its module), a ``ServerView``, or is plain ``Any``/``object`` (alone or in a union)."""
    if _name(annotation) in LOOSE or _name(annotation) in RAW_CARRIERS:
        return True
    if isinstance(annotation, ast.BinOp):
        return json_like(annotation.left, aliases) or json_like(annotation.right, aliases)
    heads = {id(n.value) for n in ast.walk(annotation) if isinstance(n, ast.Subscript)}
    for node in ast.walk(annotation):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted forward reference
            try:
                if json_like(ast.parse(node.value, mode="eval").body, aliases):
                    return True
            except SyntaxError:
                pass
        name = _name(node)
        if name in aliases or name in RAW_CARRIERS:
            return True
        if isinstance(node, ast.Subscript) and _name(node.value) in MAPPINGS:
            args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if len(args) != 2 or _name(args[1]) in LOOSE:
                return True
        elif name in MAPPINGS and id(node) not in heads:
            return True  # unsubscripted: dict[Any, Any]
    return False


def _source(module: str, stmt: ast.ImportFrom) -> str:
    """The dotted name of the module ``stmt`` (in ``module``) imports from."""
    if not stmt.level:
        return stmt.module or ""
    base = module.split(".")[:-stmt.level]
    return ".".join([*base, *([stmt.module] if stmt.module else [])])


def aliases_of(trees: Mapping[str, ast.Module]) -> dict[str, frozenset[str]]:
    """Per module of ``trees`` (by dotted name), the names of the type aliases of JSON objects it defines at module
    level (``X = dict[str, Any]``, ``X: TypeAlias = ...``) or imports (under its own name or another), through aliases
    of aliases. An attribute (``base.FreeForm``) is matched by name against every alias defined anywhere."""
    seen: dict[str, set[str]] = {m: set() for m in trees}
    grew = True
    while grew:
        grew = False
        everywhere = frozenset().union(*seen.values())
        for module, tree in trees.items():
            mine = seen[module]
            for stmt in ast.walk(tree):
                if isinstance(stmt, ast.ImportFrom):
                    source = seen.get(_source(module, stmt), set())
                    for a in stmt.names:
                        if a.name in source and (a.asname or a.name) not in mine:
                            mine.add(a.asname or a.name)
                            grew = True
            for stmt in tree.body:
                target, value = None, None
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                    target, value = stmt.targets[0].id, stmt.value
                elif isinstance(stmt, ast.AnnAssign) and _name(stmt.annotation) == "TypeAlias" \
                        and isinstance(stmt.target, ast.Name):
                    target, value = stmt.target.id, stmt.value
                if target is None or target in mine or value is None:
                    continue
                known = frozenset(mine) | _attributes(value, everywhere)
                if isinstance(value, ast.Subscript | ast.Name | ast.Attribute | ast.BinOp) \
                        and _name(value) not in LOOSE and json_like(value, known):
                    mine.add(target)
                    grew = True
    everywhere = frozenset().union(*seen.values())
    return {m: frozenset(names) | _attributes(trees[m], everywhere) for m, names in seen.items()}


def _attributes(tree: ast.AST, aliases: frozenset[str]) -> frozenset[str]:
    """The aliases among the attribute names used in ``tree`` (``base.FreeForm``)."""
    return frozenset(n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in aliases)


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = fn.args
    return [*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else []),
            *([a.kwarg] if a.kwarg else [])]


def _walk(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """(qualified name, node) of every function and class under ``node``, nested ones included."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield prefix + child.name, child
            yield from _walk(child, prefix + child.name + ".")
        else:
            yield from _walk(child, prefix)


def findings(modules: Mapping[str, ast.Module], aliases: Mapping[str, frozenset[str]]) -> tuple[set[str], list[str]]:
    """(the entries of ``modules`` that :data:`ALLOWED` must list, the other violations), for modules named as
    ``tuning.inplace`` (relative to ``decisions``); ``aliases``: each one's (:func:`aliases_of`)."""
    entries: set[str] = set()
    wrong: list[str] = []
    for module, tree in modules.items():
        known = aliases.get(module, frozenset())
        for qualname, node in _walk(tree):
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                            and json_like(stmt.annotation, known):
                        entries.add(f"{module}:{qualname}.{stmt.target.id}")
                continue
            assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            for i, arg in enumerate(_params(node)):
                if arg.annotation is None:
                    if not (i == 0 and arg.arg in ("self", "cls")):
                        wrong.append(f"{module}:{qualname}({arg.arg}) is not annotated")
                elif json_like(arg.annotation, known):
                    entries.add(f"{module}:{qualname}({arg.arg})")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in RAW_ATTRIBUTES:
                wrong.append(f"{module}:{node.lineno} reads .{node.attr}, the raw stored status")
    for target in TAKE_TYPED:
        module, function = target.split(":")
        fn = next((n for q, n in _walk(modules[module]) if q == function), None) if module in modules else None
        if isinstance(fn, ast.FunctionDef) and not any(
                a.annotation is not None and _name(a.annotation) == TYPED_STATUS for a in _params(fn)):
            wrong.append(f"{target} takes no {TYPED_STATUS}")
    return entries, wrong


def scanned() -> tuple[set[str], list[str]]:
    """:func:`findings` of ``decisions/``, its aliases resolved over the whole package."""
    trees = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"):
             ast.parse(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))}
    aliases = aliases_of(trees)
    prefix = "sglang_operator.decisions."
    mine = {m.removeprefix(prefix): t for m, t in trees.items() if m.startswith(prefix)}
    return findings(mine, {m.removeprefix(prefix): a for m, a in aliases.items() if m.startswith(prefix)})


def allowed() -> set[str]:
    return set().union(*ALLOWED.values())


def test_no_decision_takes_the_status_as_a_dict() -> None:
    entries, wrong = scanned()
    unlisted = sorted(entries - allowed())
    assert not unlisted and not wrong, (
        "decisions/ takes a JSON object (or Any, or a ServerView) where ALLOWED does not say why; the status crosses "
        "decisions/ as SGLangServerStatus only:\n" + "\n".join([*unlisted, *wrong]))


def test_every_allowed_entry_still_exists() -> None:
    entries, _ = scanned()
    assert not sorted(allowed() - entries)


def test_the_allow_list_gives_each_entry_one_reason() -> None:
    seen: dict[str, str] = {}
    for reason, names in ALLOWED.items():
        for name in names:
            assert name not in seen, f"{name}: listed for {seen[name]!r} and {reason!r}"
            seen[name] = reason


def test_the_checks_catch_what_they_look_for() -> None:
    """A status taken as a dict is found whatever it is called: renamed, through an alias, quoted, unannotated, as
    ``Any``, in a field, through the view; and the typed functions are told when they take no typed status."""
    source = '''
from collections.abc import Iterable, Mapping
from typing import Any
Json = dict[str, Any]
Blob = Json | None
def judge(s: Mapping[str, Any], fine: Mapping[str, int]) -> None: ...
def held(x: Iterable[Blob], y: "dict[str, object]", z, w: Any, v: dict, u: Mapping[str, float]) -> None: ...
class Decision:
    kept: list[Json]
    count: dict[str, int]
def decide(view: ServerView) -> None:
    view.status_data.get("revision")
'''
    tree = ast.parse(source)
    aliases = aliases_of({"observation": tree})["observation"]
    assert aliases == {"Json", "Blob"}
    entries, wrong = findings({"observation": tree, "judging": tree}, {"observation": aliases, "judging": aliases})
    got = {e.split(":", 1)[1] for e in entries}
    assert got == {"judge(s)", "held(x)", "held(y)", "held(w)", "held(v)", "Decision.kept", "decide(view)"}
    assert any("held(z) is not annotated" in w for w in wrong)
    assert any("status_data" in w for w in wrong)
    assert {w for w in wrong if "takes no" in w} == {"observation:decide takes no SGLangServerStatus",
                                                      "judging:judge takes no SGLangServerStatus",
                                                      "observation:held takes no SGLangServerStatus"}
    typed = ast.parse("from .pods import Pod as P\nfrom .api import Condition\n"
                      "def judge(status: SGLangServerStatus, pods: list[P], conds: list[Condition]) -> None: ...")
    pods = ast.parse("from typing import Any\nPod = dict[str, Any]\n")
    api = ast.parse("class Condition: ...\n")
    aliases = aliases_of({"d.judging": typed, "d.pods": pods, "d.api": api})
    assert aliases["d.judging"] == {"P"}  # an alias imported under another name; a class of an alias' name is none
    entries, wrong = findings({"judging": typed}, {"judging": aliases["d.judging"]})
    assert entries == {"judging:judge(pods)"} and not wrong
