"""Robust, filtered parse of SGLang's Prometheus text exposition (format 0.0.4) into a :class:`Parsed` scrape.

A real 0.5.23 server exposes ~160 families (~200 KiB); the sampler needs a dozen (:mod:`.roles`). The body is fed
chunk by chunk to a :class:`LineFilter`, which keeps only the lines of wanted sample names (one regex scan per chunk,
in C) and never holds the whole body; the kept lines are then parsed strictly, label sets through a cache (the same
series come back every interval).

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

from sglang_operator.decisions.sampling.roles import MetricRoles, Role

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


_VALUE_RE = rb"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[iI][nN][fF](?:inity)?|[nN][aA][nN])"
_VALUE = re.compile(_VALUE_RE)
# name, optional {labels}, a value as Prometheus' parser accepts it, optional timestamp (ms), optional CR
_LINE = re.compile(rb"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(" + _VALUE_RE + rb")(?:[ \t]+-?\d+)?[ \t]*\r?")
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
    return _LINE.fullmatch(line) is not None


def _trie(words: list[bytes]) -> bytes:
    """A regex matching exactly ``words``, factored as a trie (the engine then decides byte by byte instead of
    trying each alternative in turn)."""
    groups: dict[bytes, list[bytes]] = {}
    for w in words:
        if w:
            groups.setdefault(w[:1], []).append(w[1:])
    parts = [re.escape(first) + _trie(rest) for first, rest in sorted(groups.items())]
    body = parts[0] if len(parts) == 1 else b"(?:" + b"|".join(parts) + b")"
    if b"" in words:
        return b"(?:" + body + b")?" if parts else b""
    return body


def _line_pattern(names: tuple[bytes, ...]) -> re.Pattern[bytes]:
    """Lines starting with one of ``names`` followed by ``{`` or a blank, each preceded by a line feed (the
    caller puts one in front of the first line). The literal prefix all names share lets the regex engine scan
    for it at C speed instead of trying every position."""
    prefix = min(names, default=b"")
    for name in names:
        while not name.startswith(prefix):
            prefix = prefix[:-1]
    rest = _trie([n[len(prefix):] for n in names])
    return re.compile(rb"\n(" + re.escape(prefix) + rest + rb"[{ \t][^\n]*)")


class LineFilter:
    """Fed a body chunk by chunk; keeps the lines whose sample name is wanted by ``roles``.

    Memory: the kept lines, the first sample line and one partial line — never the body. :meth:`finish` ends it.
    """

    def __init__(self, roles: MetricRoles) -> None:
        self.roles = roles
        self._pattern = _PATTERNS.get(roles.prefixes) or _PATTERNS.setdefault(roles.prefixes,
                                                                              _line_pattern(roles.prefixes))
        self._carry = b"\n"  # a line feed, then the partial line not yet complete
        self.kept: list[bytes] = []
        self.first_sample: bytes | None = None
        self.size = 0

    def feed(self, chunk: bytes) -> None:
        """Consume the next chunk of the body."""
        if not chunk:
            return
        self.size += len(chunk)
        data = self._carry + chunk
        cut = data.rfind(b"\n")
        complete, self._carry = data[:cut], data[cut:]
        if not complete:
            return
        if self.first_sample is None:
            self.first_sample = _first_sample(complete)
        self.kept.extend(self._pattern.findall(complete))

    def finish(self) -> Parsed:
        """The wanted series of everything fed. Raises :class:`ParseError` (see the module docstring)."""
        if self._carry[1:].strip():
            raise ParseError("truncated", f"body ends inside a line: {self._carry[-60:]!r}")
        if self.first_sample is not None and not looks_like_sample(self.first_sample):
            raise ParseError("parse", f"not Prometheus text: {self.first_sample[:80]!r}")
        return parse_lines(self.kept, self.roles, self.size)


_PATTERNS: dict[tuple[bytes, ...], re.Pattern[bytes]] = {}


def _first_sample(text: bytes) -> bytes | None:
    """The first line of ``text`` (which starts with a line feed) that is neither blank nor a comment."""
    pos = 0
    while pos < len(text):
        end = text.find(b"\n", pos + 1)
        end = len(text) if end == -1 else end
        line = text[pos + 1:end] if text[pos:pos + 1] == b"\n" else text[pos:end]
        if line.strip() and not line.startswith(b"#"):
            return line
        pos = end
    return None


LABEL_CACHE_SIZE = 65536
"""Label sets remembered between scrapes (the same series come back every interval)."""
_series: dict[tuple[bytes, bool], tuple[str, float | None]] = {}


def _series_of(raw: bytes, bucket: bool, line: bytes) -> tuple[str, float | None]:
    """(series key: sorted ``name="value"`` pairs without ``le`` for a bucket, the bucket's upper bound)."""
    hit = _series.get((raw, bucket))
    if hit is None:
        try:
            labels = _labels(raw.decode("utf-8")) if raw else {}
        except UnicodeDecodeError as exc:
            raise ParseError("parse", f"labels are not UTF-8: {line[:80]!r}") from exc
        bound = None
        if bucket:
            le = labels.pop(LE, None)
            if le is None:
                raise ParseError("parse", f"bucket without le: {line[:80]!r}")
            bound = _value(le.encode())
            if math.isnan(bound):
                raise ParseError("parse", f"bucket with le=NaN: {line[:80]!r}")
        hit = (",".join(f'{k}="{v}"' for k, v in sorted(labels.items())), bound)
        if len(_series) >= LABEL_CACHE_SIZE:
            _series.clear()
        _series[(raw, bucket)] = hit
    return hit


_Info = tuple[Role, str, str, float | None, str]  # role, suffix, series key, bucket bound, kind


def _info(roles: MetricRoles, name: bytes, raw: bytes, line: bytes) -> _Info | None:
    """What a sample line of ``name{raw}`` is, remembered between scrapes (in ``roles.lines``); None for a name
    that is not wanted."""
    infos: dict[tuple[bytes, bytes], _Info | None] = roles.lines
    k = (name, raw)
    if k in infos:
        return infos[k]
    wanted = roles.samples.get(name)
    info: _Info | None = None
    if wanted is not None:
        role, suffix = wanted
        key, bound = _series_of(raw, suffix == "_bucket", line)
        info = (role, suffix, key, bound, roles.kinds[role])
    if len(infos) >= LABEL_CACHE_SIZE:
        infos.clear()
    infos[k] = info
    return info


def parse_lines(lines: list[bytes], roles: MetricRoles, size: int = 0) -> Parsed:
    """Parse kept sample lines strictly. Raises :class:`ParseError` (reason ``parse``) on a malformed line."""
    counters: dict[Role, dict[str, float]] = {}
    gauges: dict[Role, dict[str, float]] = {}
    hist: dict[Role, dict[str, tuple[list[tuple[float, float]], dict[str, float]]]] = {}
    seen: set[tuple[Role, str, str, float | None]] = set()
    duplicates = 0
    fullmatch = _LINE.fullmatch
    for line in lines:
        m = fullmatch(line)
        if m is None:
            raise ParseError("parse", f"bad sample line {line[:80]!r}")
        name, raw, text = m.group(1, 2, 3)
        info = _info(roles, name, raw or b"", line)
        if info is None:  # a longer name sharing a wanted prefix (e.g. ..._total_foo)
            continue
        role, suffix, key, bound, kind = info
        ident = (role, suffix, key, bound)
        if ident in seen:
            duplicates += 1
            continue
        seen.add(ident)
        value = float(text)
        if kind == "counter":
            counters.setdefault(role, {})[key] = value
        elif kind == "gauge":
            gauges.setdefault(role, {})[key] = value
        else:
            series = hist.setdefault(role, {}).get(key)
            if series is None:
                series = hist[role][key] = ([], {})
            if bound is not None:
                series[0].append((bound, value))
            else:
                series[1][suffix] = value
    histograms = {role: {key: HistogramSeries(tuple(sorted(b)), other.get("_sum"), other.get("_count"))
                         for key, (b, other) in series.items()} for role, series in hist.items()}
    return Parsed(counters, gauges, histograms, duplicates, size)


def parse_text(body: bytes, roles: MetricRoles) -> Parsed:
    """Parse a whole body at once (tests, tools); same rules as :class:`LineFilter`."""
    f = LineFilter(roles)
    f.feed(body)
    return f.finish()
