"""Robust, filtered parse of SGLang's Prometheus text exposition (format 0.0.4) into a :class:`Parsed` scrape.

A real 0.5.23 server exposes ~160 families (hundreds of KiB); the sampler needs a dozen (:mod:`.roles`). The
body is fed chunk by chunk to a :class:`LineFilter`, which keeps only the lines of wanted sample names (a C-level
``bytes.startswith`` per line) and never holds the whole body; the kept lines are then parsed strictly.

What counts as broken, with the ``reason`` the scrape error is counted under (``sglang_operator_scrape_errors_total``):

- ``parse``: the first sample line is not Prometheus text (HTML, binary, JSON), a kept line is malformed, or it
  is not UTF-8;
- ``truncated``: the body does not end with a line feed (the format requires it; Prometheus' own parser fails
  such a scrape: ``model/textparse/promparse.go``).

What is handled as Prometheus handles it (no error): duplicate series (the first sample is kept, later ones are
dropped and counted in :attr:`Parsed.duplicates`, like ``prometheus_target_scrapes_sample_duplicate_timestamp_total``);
NaN and ±Inf values (kept: a figure computed from them is ``None``, as NaN propagates through ``rate()``);
histograms with missing buckets (kept as they are; ``histogram_quantile`` without a ``+Inf`` bucket is ``None``).
Lines of families the sampler does not read are not validated.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from sglang_operator.sampling.roles import MetricRoles, Role

LE = "le"


class ParseError(ValueError):
    """The exposition cannot be used; ``reason`` is the label value it is counted under."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class HistogramSeries:
    """One histogram series (one label set without ``le``): cumulative ``buckets`` as (upper bound, count) sorted
    by bound, and ``sum`` (seconds for latency histograms) and ``count``; ``None`` where the exposition lacks them."""

    buckets: tuple[tuple[float, float], ...] = ()
    sum: float | None = None
    count: float | None = None


@dataclass(frozen=True)
class Parsed:
    """The wanted series of one ``/metrics`` body.

    ``counters`` and ``gauges``: role → {series key: value}; ``histograms``: role → {series key:
    :class:`HistogramSeries`}. A series key is the sorted ``name="value"`` label pairs (``le`` excluded), so the
    same series matches across scrapes. ``duplicates``: samples dropped because their series appeared before.
    ``size``: body bytes.
    """

    counters: Mapping[Role, Mapping[str, float]] = field(default_factory=dict)
    gauges: Mapping[Role, Mapping[str, float]] = field(default_factory=dict)
    histograms: Mapping[Role, Mapping[str, HistogramSeries]] = field(default_factory=dict)
    duplicates: int = 0
    size: int = 0


# name, optional {labels}, value, optional timestamp (ms)
_LINE = re.compile(rb"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+-?\d+)?[ \t]*")
_VALUE = re.compile(rb"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[iI][nN][fF](?:inity)?|[nN][aA][nN])")
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(?:,|$)')
_UNESCAPE = re.compile(r"\\(.)")


def _unescape(value: str) -> str:
    return _UNESCAPE.sub(lambda m: "\n" if m[1] == "n" else m[1], value) if "\\" in value else value


def _labels(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    pos, end = 0, len(text.rstrip(" \t"))
    while pos < end:
        m = _LABEL.match(text, pos)
        if m is None or m.end() == pos:
            raise ParseError("parse", f"bad label set {{{text[:80]}}}")
        out[m[1]] = _unescape(m[2])
        pos = m.end()
    return out


def _value(raw: bytes) -> float:
    if not _VALUE.fullmatch(raw):
        raise ParseError("parse", f"bad sample value {raw[:40]!r}")
    return float(raw)


def looks_like_sample(line: bytes) -> bool:
    """Whether ``line`` is a well-formed sample line (used to recognise garbage from its first sample)."""
    m = _LINE.fullmatch(line.rstrip(b"\r"))
    return m is not None and _VALUE.fullmatch(m[3]) is not None


class LineFilter:
    """Fed a body chunk by chunk; keeps the lines whose sample name is wanted by ``roles``.

    Memory: the kept lines, the first sample line and one partial line — never the body. :meth:`finish` ends it.
    """

    def __init__(self, roles: MetricRoles) -> None:
        self.roles = roles
        self._prefixes = roles.prefixes
        self._carry = b""
        self.kept: list[bytes] = []
        self.first_sample: bytes | None = None
        self.size = 0

    def feed(self, chunk: bytes) -> None:
        """Consume the next chunk of the body."""
        if not chunk:
            return
        self.size += len(chunk)
        data = self._carry + chunk if self._carry else chunk
        lines = data.split(b"\n")
        self._carry = lines.pop()
        if self.first_sample is None:
            self.first_sample = next((ln for ln in lines if ln.strip() and not ln.startswith(b"#")), None)
        prefixes = self._prefixes
        self.kept.extend(ln for ln in lines if ln.startswith(prefixes))

    def finish(self) -> Parsed:
        """The wanted series of everything fed. Raises :class:`ParseError` (see the module docstring)."""
        if self._carry.strip():
            raise ParseError("truncated", f"body ends inside a line: {self._carry[-60:]!r}")
        if self.first_sample is not None and not looks_like_sample(self.first_sample):
            raise ParseError("parse", f"not Prometheus text: {self.first_sample[:80]!r}")
        return parse_lines(self.kept, self.roles, self.size)


def parse_lines(lines: list[bytes], roles: MetricRoles, size: int = 0) -> Parsed:
    """Parse kept sample lines strictly. Raises :class:`ParseError` (reason ``parse``) on a malformed line."""
    counters: dict[Role, dict[str, float]] = {}
    gauges: dict[Role, dict[str, float]] = {}
    hist: dict[Role, dict[str, _HistogramBuilder]] = {}
    seen: set[tuple[bytes, str]] = set()
    duplicates = 0
    for line in lines:
        m = _LINE.fullmatch(line.rstrip(b"\r"))
        if m is None:
            raise ParseError("parse", f"bad sample line {line[:80]!r}")
        wanted = roles.samples.get(m[1])
        if wanted is None:  # a longer name sharing a wanted prefix (e.g. ..._total_foo)
            continue
        role, suffix = wanted
        try:
            labels = _labels(m[2].decode("utf-8")) if m[2] else {}
        except UnicodeDecodeError as exc:
            raise ParseError("parse", f"labels are not UTF-8: {line[:80]!r}") from exc
        value = _value(m[3])
        le = labels.pop(LE, None) if suffix == "_bucket" else None
        key = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        ident = (m[1], key if le is None else f"{key}|{le}")
        if ident in seen:
            duplicates += 1
            continue
        seen.add(ident)
        kind = roles.kinds[role]
        if kind == "counter":
            counters.setdefault(role, {})[key] = value
        elif kind == "gauge":
            gauges.setdefault(role, {})[key] = value
        else:
            hist.setdefault(role, {}).setdefault(key, _HistogramBuilder()).add(suffix, le, value, line)
    histograms = {role: {key: b.build() for key, b in series.items()} for role, series in hist.items()}
    return Parsed(counters, gauges, histograms, duplicates, size)


class _HistogramBuilder:
    def __init__(self) -> None:
        self.buckets: list[tuple[float, float]] = []
        self.sum: float | None = None
        self.count: float | None = None

    def add(self, suffix: str, le: str | None, value: float, line: bytes) -> None:
        if suffix == "_sum":
            self.sum = value
        elif suffix == "_count":
            self.count = value
        else:
            if le is None:
                raise ParseError("parse", f"bucket without le: {line[:80]!r}")
            bound = _value(le.encode())
            if math.isnan(bound):
                raise ParseError("parse", f"bucket with le=NaN: {line[:80]!r}")
            self.buckets.append((bound, value))

    def build(self) -> HistogramSeries:
        return HistogramSeries(tuple(sorted(self.buckets)), self.sum, self.count)


def parse_text(body: bytes, roles: MetricRoles) -> Parsed:
    """Parse a whole body at once (tests, tools); same rules as :class:`LineFilter`."""
    f = LineFilter(roles)
    f.feed(body)
    return f.finish()
