"""Static extraction of SGLang's Prometheus metric families from a wheel.

Source: the collector module of the release, ``sglang/srt/metrics/collector.py`` (0.4.6–0.5.9) or
``sglang/srt/observability/metrics_collector.py`` (0.5.10–0.5.23; :func:`collector_module`): every
``Gauge/Counter/Histogram/Summary/Info(name="sglang:...")`` and ``GaugeHistogram`` (a Gauge with extra
``gt``/``le`` labels, ``sglang/srt/utils/gauge_histogram.py``) created by the collector classes.
Metrics defined elsewhere (HTTP middleware in ``utils/common.py``, ``func_timer.py``, ``cpu_monitor.py``)
are not collector metrics and are left out, as in the reference dumps.
"""

from __future__ import annotations

import ast
from typing import Any

from sglang_operator_tools.extract.static import Evaluator, Unresolved, Wheel

COLLECTOR_MODULES = ("sglang.srt.observability.metrics_collector", "sglang.srt.metrics.collector")
"""Where the metrics collector lives, newest layout first (moved to ``observability/`` in 0.5.10)."""
_CONSTRUCTORS = {"Gauge", "Counter", "Histogram", "Summary", "Info", "GaugeHistogram"}
COLLECTOR_LABELS = "<collector labels>"


def _labels(node: ast.expr | None, local_lists: dict[str, ast.expr]) -> tuple[bool, list[str]] | None:
    """``(uses collector labels, extra literal label names)`` of a ``labelnames=`` expression."""
    if node is None:
        return False, []
    if isinstance(node, ast.Call):
        fn = ast.unparse(node.func)
        if fn.endswith("labels.keys") or fn.endswith(".keys"):
            return True, []
        if fn in ("list", "tuple", "sorted") and node.args:
            return _labels(node.args[0], local_lists)
        return None
    if isinstance(node, ast.Attribute) and node.attr in ("labels", "labelnames"):
        return True, []
    if isinstance(node, ast.Name):
        if node.id in local_lists:
            return _labels(local_lists[node.id], local_lists)
        return (True, []) if node.id in ("labels", "labelnames", "label_names") else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _labels(node.left, local_lists), _labels(node.right, local_lists)
        if left is None or right is None:
            return None
        return left[0] or right[0], left[1] + right[1]
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        base, extra = False, list[str]()
        for elt in node.elts:
            if isinstance(elt, ast.Starred):
                sub = _labels(elt.value, local_lists)
                if sub is None:
                    return None
                base, extra = base or sub[0], extra + sub[1]
            elif isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                extra.append(elt.value)
            else:
                return None
        return base, extra
    return None


def collector_module(wheel: Wheel) -> str:
    """The dotted name of the wheel's metrics collector module; raises :class:`Unresolved` when absent."""
    for module in COLLECTOR_MODULES:
        if wheel.has_module(module):
            return module
    raise Unresolved(f"no metrics collector module ({', '.join(COLLECTOR_MODULES)})")


def _text(ev: Evaluator, node: ast.expr | None, module: str) -> str:
    if node is None:
        return ""
    try:
        val = ev.eval(node, module, {})
        return val if isinstance(val, str) else ast.unparse(node)
    except Unresolved:
        return ast.unparse(node)


def extract_metrics(wheel: Wheel) -> list[dict[str, Any]]:
    """Metric families of the wheel's collectors, sorted by name.

    Record keys: ``name`` (as declared, e.g. ``sglang:prompt_tokens_total``), ``family`` (as
    prometheus_client's text parser reports it: counters without ``_total``), ``type`` (Prometheus
    type: counter/gauge/histogram/summary/info), ``declared_as`` (constructor), ``collector`` (class),
    ``collector_labels`` (bool: the collector's base labels — ``model_name``, ``engine_type``,
    ``tp_rank``, ... — come first), ``labels`` (extra label names), ``labels_expr`` (source text, set
    only when the label list could not be read statically), ``multiprocess_mode`` (gauges only;
    ``all`` adds a ``pid`` label), ``help``.
    """
    ev = Evaluator(wheel)
    module = collector_module(wheel)
    tree = wheel.module(module)
    out: dict[str, dict[str, Any]] = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        local_lists: dict[str, ast.expr] = {}
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                local_lists[node.targets[0].id] = node.value
            if not isinstance(node, ast.Call):
                continue
            ctor = ast.unparse(node.func).rsplit(".", 1)[-1]
            if ctor not in _CONSTRUCTORS:
                continue
            kws = {k.arg: k.value for k in node.keywords if k.arg}
            name_node = kws.get("name", node.args[0] if node.args else None)
            if not (isinstance(name_node, ast.Constant) and isinstance(name_node.value, str)):
                continue  # collections.Counter(...) and friends
            name = name_node.value
            label_node = kws.get("labelnames", node.args[2] if len(node.args) > 2 else None)
            labels = _labels(label_node, local_lists)
            prom_type = "gauge" if ctor == "GaugeHistogram" else ctor.lower()
            rec: dict[str, Any] = {
                "name": name,
                "family": name[: -len("_total")] if prom_type == "counter" and name.endswith("_total") else name,
                "type": prom_type,
                "declared_as": ctor,
                "collector": cls.name,
                "collector_labels": labels[0] if labels else True,
                "labels": (labels[1] if labels else []) + (["gt", "le"] if ctor == "GaugeHistogram" else []),
                "help": _text(ev, kws.get("documentation", node.args[1] if len(node.args) > 1 else None), module),
            }
            if labels is None and label_node is not None:
                rec["labels_expr"] = ast.unparse(label_node)
            if prom_type == "gauge":
                mode = kws.get("multiprocess_mode")
                default_mode = "mostrecent" if ctor == "GaugeHistogram" else "all"
                rec["multiprocess_mode"] = mode.value if isinstance(mode, ast.Constant) else default_mode
            out.setdefault(name, rec)
    return [out[k] for k in sorted(out)]
