"""Compare extracted tables with reference dumps made by importing a wheel's own parser.

The reference format (``flags-<v>.tsv``): ``options dest type default choices nargs``, where ``type`` is the
type callable's name or, without one, the argparse action class name, and ``default`` is ``repr()``.
Used only by ``scripts/extract_sglang.py --compare DIR`` while developing the extractor.
"""

from __future__ import annotations

from typing import Any

_ACTION_CLASS = {
    "store": "_StoreAction",
    "store_true": "_StoreTrueAction",
    "store_false": "_StoreFalseAction",
    "store_const": "_StoreConstAction",
    "append": "_AppendAction",
}


def flag_row(flag: dict[str, Any]) -> tuple[str, ...]:
    """One flag record rendered as a reference TSV row."""
    typ = flag["type"] or _ACTION_CLASS.get(flag["action"], flag["action"])
    choices = flag["choices"]
    return (
        " ".join(flag["options"]),
        flag["dest"],
        typ,
        repr(flag["default"]),
        "" if choices is None else ",".join(str(c) for c in choices),
        "" if flag["nargs"] is None else str(flag["nargs"]),
    )


def compare_flags(flags: list[dict[str, Any]], tsv: str) -> list[str]:
    """Differences between extracted flags and a reference TSV, as readable lines (empty = agree).

    Choice lists built from Python sets are compared as sets (their order is hash-dependent);
    defaults that are tuples in SGLang compare equal to the lists JSON gives back.
    """
    ref_rows = [line.split("\t") for line in tsv.splitlines()[1:] if line.strip()]
    ref = {r[0]: r for r in ref_rows}
    ours = {row[0]: row for row in map(flag_row, flags)}
    diffs = [f"only in reference: {k}" for k in ref if k not in ours]
    diffs += [f"only in extraction: {k}" for k in ours if k not in ref]
    for key, mine in ours.items():
        theirs = ref.get(key)
        if theirs is None:
            continue
        theirs = (theirs + [""] * 6)[:6]
        for col, a, b in zip(("options", "dest", "type", "default", "choices", "nargs"), mine, theirs, strict=True):
            if col == "choices" and sorted(a.split(",")) == sorted(b.split(",")):
                continue
            if col == "default" and a.replace("[", "(").replace("]", ")") == b.replace("[", "(").replace("]", ")"):
                continue
            if a != b:
                diffs.append(f"{key}: {col} extracted {a!r} reference {b!r}")
    if [r[0] for r in ref_rows] != [flag_row(f)[0] for f in flags]:
        diffs.append("registration order differs")
    return diffs


def compare_metrics(metrics: list[dict[str, Any]], txt: str) -> list[str]:
    """Differences between extracted metric names and a reference name list (one a line)."""
    ref = {line.strip() for line in txt.splitlines() if line.strip()}
    ours = {m["name"] for m in metrics}
    return [f"only in reference: {n}" for n in sorted(ref - ours)] + [
        f"only in extraction: {n}" for n in sorted(ours - ref)
    ]
