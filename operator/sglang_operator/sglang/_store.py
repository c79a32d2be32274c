"""The compact on-disk form of the per-release SGLang data (``data/releases.json``, ``flags.json``, ``metrics.json``).

Every distinct flag record (one argparse action) and metric record is stored once, in ``flags.json`` /
``metrics.json`` (``{"records": [...]}``, numbered in order of first appearance, oldest release first). A release
in ``releases.json`` lists its records as runs of ids (``"0-123,130,124-129"``, registration order kept: argparse's
"ambiguous option" message lists candidates in that order) or, when its list equals an earlier release's (most
post-releases), names that release (``"flags_of": "0.4.6"``). Each release keeps its own header: version, wheel
file name, the wheel's sha256, argparse prog, sources and the dialect facts read from the wheel.

:func:`encode` (used by ``scripts/extract_sglang.py``) and :func:`decode` are inverse: ``decode(encode(docs))``
gives back the per-release documents of :func:`sglang_operator_tools.extract.build_release`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

FORMAT = 1
FILES = ("releases.json", "flags.json", "metrics.json")
_KINDS = ("flags", "metrics")
_HEADER = ("version", "wheel", "wheel_sha256", "prog", "flags_source", "metrics_source", "dialect")


def _key(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, ensure_ascii=False)


def _runs(ids: Sequence[int]) -> str:
    out: list[str] = []
    start = prev = None
    for i in ids:
        if start is not None and prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None and prev is not None:
            out.append(f"{start}-{prev}" if start != prev else str(start))
        start = prev = i
    if start is not None and prev is not None:
        out.append(f"{start}-{prev}" if start != prev else str(start))
    return ",".join(out)


def parse_runs(text: str) -> list[int]:
    """``"0-3,7"`` → ``[0, 1, 2, 3, 7]``."""
    out: list[int] = []
    for part in filter(None, text.split(",")):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def dump(doc: dict[str, Any]) -> str:
    """Deterministic JSON text: one record or release per line, sorted keys, trailing newline."""
    lines = []
    for key in sorted(doc):
        value = doc[key]
        if isinstance(value, list):
            items = ",\n".join("  " + json.dumps(v, sort_keys=True, ensure_ascii=False) for v in value)
            lines.append(f' {json.dumps(key)}: [\n{items}\n ]')
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value, sort_keys=True, ensure_ascii=False)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def encode(docs: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Per-release documents (oldest first) → ``{file name: text}`` for :data:`FILES`."""
    records: dict[str, dict[str, int]] = {k: {} for k in _KINDS}
    tables: dict[str, list[dict[str, Any]]] = {k: [] for k in _KINDS}
    first_with: dict[str, dict[str, str]] = {k: {} for k in _KINDS}
    releases = []
    for doc in docs:
        entry = {k: doc[k] for k in _HEADER}
        for kind in _KINDS:
            ids = []
            for rec in doc[kind]:
                key = _key(rec)
                if key not in records[kind]:
                    records[kind][key] = len(tables[kind])
                    tables[kind].append(rec)
                ids.append(records[kind][key])
            runs = _runs(ids)
            same = first_with[kind].setdefault(runs, doc["version"])
            if same != doc["version"]:
                entry[f"{kind}_of"] = same
            else:
                entry[kind] = runs
        releases.append(entry)
    about = ("SGLang releases known to sglang-operator, each read statically from its PyPI wheel by "
             "scripts/extract_sglang.py; record ids refer to flags.json / metrics.json (see sglang/_store.py)")
    return {
        "releases.json": dump({"about": about, "format": FORMAT, "releases": releases}),
        "flags.json": dump({"format": FORMAT, "records": tables["flags"]}),
        "metrics.json": dump({"format": FORMAT, "records": tables["metrics"]}),
    }


def decode(releases: dict[str, Any], flags: dict[str, Any], metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The parsed JSON of :data:`FILES` → the per-release documents, oldest first.

    Raises ``ValueError`` for an unknown format or a dangling ``*_of`` reference.
    """
    if releases.get("format") != FORMAT:
        raise ValueError(f"unknown SGLang data format {releases.get('format')!r}")
    tables = {"flags": flags["records"], "metrics": metrics["records"]}
    runs_of: dict[str, dict[str, str]] = {k: {} for k in _KINDS}
    out = []
    for entry in releases["releases"]:
        doc = {k: entry[k] for k in _HEADER}
        for kind in _KINDS:
            runs = entry.get(kind)
            if runs is None:
                other = entry[f"{kind}_of"]
                if other not in runs_of[kind]:
                    raise ValueError(f"{entry['version']}: {kind}_of {other} is not an earlier release")
                runs = runs_of[kind][other]
            runs_of[kind][entry["version"]] = runs
            doc[kind] = [tables[kind][i] for i in parse_runs(runs)]
        out.append(doc)
    return out


def decode_one(releases: dict[str, Any], flags: dict[str, Any], metrics: dict[str, Any],
               version: str) -> dict[str, Any]:
    """The document of one release (what :func:`decode` gives for it), without decoding the others.

    Raises ``KeyError`` for a release not in ``releases``."""
    entries = {e["version"]: e for e in releases["releases"]}
    entry = entries[version]
    doc = {k: entry[k] for k in _HEADER}
    for kind, table in (("flags", flags["records"]), ("metrics", metrics["records"])):
        runs = entry.get(kind)
        if runs is None:
            runs = entries[entry[f"{kind}_of"]][kind]
        doc[kind] = [table[i] for i in parse_runs(runs)]
    return doc


def table_of(releases: dict[str, Any], kind: str) -> dict[str, str]:
    """Release → the release whose list it shares (itself when it has its own) for ``kind`` flags/metrics."""
    out: dict[str, str] = {}
    for entry in releases["releases"]:
        out[entry["version"]] = entry.get(f"{kind}_of") or entry["version"]
    return out
