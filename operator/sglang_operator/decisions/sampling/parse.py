"""Robust, filtered parse of SGLang's Prometheus text exposition (format 0.0.4) into a :class:`Parsed` scrape.

A real 0.5.23 server exposes ~160 families (~200 KiB); the sampler needs a dozen (:mod:`.roles`). The body is fed
chunk by chunk to a :class:`LineFilter`, which keeps only the lines of wanted sample names (one regex scan per chunk,
in C) and never holds the whole body; the kept lines are then parsed strictly, label sets through the pod's
:class:`~sglang_operator.decisions.sampling.cache.SeriesCache` (the same series come back every interval), all
under :class:`~sglang_operator.decisions.sampling.limits.ScrapeLimits`.

What counts as broken, with the ``reason`` the scrape error is counted under (``sglang_operator_scrape_errors_total``):

- ``parse``: the first sample line is not Prometheus text (HTML, binary, JSON), a kept line is malformed, or it
  is not UTF-8;
- ``truncated``: the body does not end with a line feed (the format requires it; Prometheus' own parser fails
  such a scrape: ``model/textparse/promparse.go``);
- ``too_many_samples``, ``too_many_labels``, ``label_value_too_long``: a limit of
  :class:`~sglang_operator.decisions.sampling.limits.ScrapeLimits` is breached (Prometheus' ``sample_limit``,
  ``label_limit``, ``label_value_length_limit``); the sample limit stops the read as soon as it is passed, and a
  kept line long enough to hold a too long label value is checked as it arrives, not after the body.

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
from functools import lru_cache

from sglang_operator.decisions.sampling.cache import SeriesCache
from sglang_operator.decisions.sampling.limits import ScrapeLimits
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
# The value as the "unrolled loop" with possessive repeats (Python 3.11+): runs of plain characters are one
# single-character repeat and no backtracking point is kept per escape. ``(?:[^"\\]|\\.)*`` kept one per character:
# 1.3 GiB to match a 7 MiB value (e2e/tests/test_hostile.py).
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"([^"\\]*+(?:\\.[^"\\]*+)*+)"[ \t]*(?:,|$)')
_UNESCAPE = re.compile(r"\\(.)")


def _unescape(value: str) -> str:
    return _UNESCAPE.sub(lambda m: "\n" if m[1] == "n" else m[1], value) if "\\" in value else value


def _labels(text: str, limits: ScrapeLimits) -> dict[str, str]:
    out: dict[str, str] = {}
    pos, end = 0, len(text.rstrip(" \t"))
    while pos < end:
        m = _LABEL.match(text, pos)
        if m is None or m.end() == pos:
            raise ParseError("parse", f"bad label set {{{text[:80]}}}")
        if len(out) >= limits.labels:
            raise ParseError("too_many_labels", f"more than {limits.labels} labels: {{{text[:80]}")
        if m.end(2) - m.start(2) > 2 * limits.label_value_length:  # even all escapes: too long (not copied)
            raise ParseError("label_value_too_long", f"label {m[1]} has a value of {m.end(2) - m.start(2)} "
                                                     f"characters (escapes included), over "
                                                     f"{limits.label_value_length}")
        value = _unescape(m[2])
        if len(value) > limits.label_value_length:
            raise ParseError("label_value_too_long", f"label {m[1]} has a value of {len(value)} characters, over "
                                                     f"{limits.label_value_length}")
        out[m[1]] = value
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


@lru_cache(maxsize=32)  # one per SGLang release's roles
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
    """Fed a body chunk by chunk; keeps the lines whose sample name is wanted by ``roles``, under ``limits``
    (default :class:`ScrapeLimits`; the body size is the reader's to enforce), label sets through ``cache`` (the
    pod's; default a fresh one of ``limits.cache_bytes``).

    Memory: the kept lines, the first sample line and one partial line — never the body. A partial line is kept as
    the chunks it came in and joined once, when its end arrives (a long line costs its length, not its length
    squared). :meth:`finish` ends it.
    """

    def __init__(self, roles: MetricRoles, cache: SeriesCache | None = None,
                 limits: ScrapeLimits | None = None) -> None:
        self.roles = roles
        self.limits = limits or ScrapeLimits()
        self.cache = cache if cache is not None else SeriesCache(self.limits.cache_bytes)
        self._pattern = _line_pattern(roles.prefixes)
        self._carry = [b"\n"]  # a line feed, then the partial line not yet complete, as the chunks it came in
        self.kept: list[bytes] = []
        self.first_sample: bytes | None = None
        self.size = 0
        self.samples = 0

    def feed(self, chunk: bytes) -> None:
        """Consume the next chunk of the body. Raises :class:`ParseError` as soon as a limit is breached."""
        if not chunk:
            return
        self.size += len(chunk)
        cut = chunk.rfind(b"\n")
        if cut == -1:
            self._carry.append(chunk)
            return
        complete = b"".join([*self._carry, chunk[:cut]])
        self._carry = [chunk[cut:]]
        if self.first_sample is None:
            self.first_sample = _first_sample(complete)
        found = self._pattern.findall(complete)
        del complete  # the kept lines are copies: a long line is not held twice while it is checked
        self.samples += len(found)
        if self.samples > self.limits.samples:
            raise ParseError("too_many_samples", f"more than {self.limits.samples} samples the sampler reads")
        if found and max(map(len, found)) > self.limits.label_value_length:
            for line in found:  # only a line this long can hold a too long label value: check it before keeping it
                if len(line) > self.limits.label_value_length and (m := _LINE.fullmatch(line)) is not None:
                    _labels(_utf8(m[2] or b"", line), self.limits)
        self.kept.extend(found)

    def _check(self) -> None:
        """Raise :class:`ParseError` when the body fed is truncated or not Prometheus text."""
        rest = b"".join(self._carry)
        if rest[1:].strip():
            raise ParseError("truncated", f"body ends inside a line: {rest[-60:]!r}")
        if self.first_sample is not None and not looks_like_sample(self.first_sample):
            raise ParseError("parse", f"not Prometheus text: {self.first_sample[:80]!r}")

    def checked(self) -> Kept:
        """The kept lines of everything fed, checked but not parsed (the cheap part: the parse may run elsewhere,
        :mod:`sglang_operator.io.parse_pool`); the filter lets go of them. Raises :class:`ParseError` (``truncated``,
        ``parse``: see the module docstring)."""
        self._check()
        kept, self.kept = self.kept, []
        return Kept(b"\n".join(kept), len(kept), self.size)

    def finish(self) -> Parsed:
        """The wanted series of everything fed. Raises :class:`ParseError` (see the module docstring)."""
        self._check()
        return parse_lines(self.kept, self.roles, self.size, self.cache, self.limits)


@dataclass(frozen=True)
class Kept:
    """The sample lines a :class:`LineFilter` kept of one body, not parsed yet: ``lines`` joined by line feeds (one
    bytes object: cheap to hand to another process), ``count`` of them, ``size`` (bytes of the whole body)."""

    lines: bytes
    count: int
    size: int

    def split(self) -> list[bytes]:
        """The lines as :func:`parse_lines` takes them."""
        return self.lines.split(b"\n") if self.count else []


class KeptFilter:
    """A body consumer (:class:`~sglang_operator.io.sglang_http.BodyConsumer`) whose :meth:`finish` gives the
    :class:`Kept` lines of a :class:`LineFilter` of ``roles`` under ``limits`` (the same checks, the parse
    left to the caller)."""

    def __init__(self, roles: MetricRoles, limits: ScrapeLimits) -> None:
        self.filter = LineFilter(roles, SeriesCache(1), limits)

    def feed(self, chunk: bytes) -> None:
        """:meth:`LineFilter.feed`."""
        self.filter.feed(chunk)

    def finish(self) -> Kept:
        """:meth:`LineFilter.checked`."""
        return self.filter.checked()


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


def _utf8(raw: bytes, line: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParseError("parse", f"labels are not UTF-8: {line[:80]!r}") from exc


def _series_of(raw: bytes, bucket: bool, line: bytes, limits: ScrapeLimits) -> tuple[str, float | None]:
    """(series key: sorted ``name="value"`` pairs without ``le`` for a bucket, the bucket's upper bound)."""
    labels = _labels(_utf8(raw, line), limits) if raw else {}
    bound = None
    if bucket:
        le = labels.pop(LE, None)
        if le is None:
            raise ParseError("parse", f"bucket without le: {line[:80]!r}")
        bound = _value(le.encode())
        if math.isnan(bound):
            raise ParseError("parse", f"bucket with le=NaN: {line[:80]!r}")
    return ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())), bound


_Info = tuple[Role, str, str, float | None, str]  # role, suffix, series key, bucket bound, kind
_MISS: object = object()  # not in the cache (None is a cached answer: not wanted)


def _info(roles: MetricRoles, k: tuple[bytes, bytes], line: bytes, cache: SeriesCache,
          limits: ScrapeLimits) -> _Info | None:
    """What a sample line of ``name{raw}`` (``k``) not in ``cache`` is, remembered there for the next scrapes; None
    for a name that is not wanted. A line that breaks a limit raises before anything of it is cached."""
    name, raw = k
    wanted = roles.samples.get(name)
    info: _Info | None = None
    if wanted is not None:
        role, suffix = wanted
        key, bound = _series_of(raw, suffix == "_bucket", line, limits)
        info = (role, suffix, key, bound, roles.kinds[role])
    cache.put(k, info, len(info[2]) if info is not None else 0)
    return info


def parse_lines(lines: list[bytes], roles: MetricRoles, size: int = 0, cache: SeriesCache | None = None,
                limits: ScrapeLimits | None = None) -> Parsed:
    """Parse kept sample lines strictly, label sets through ``cache`` (default: a fresh one), under ``limits``
    (default :class:`ScrapeLimits`). Raises :class:`ParseError`: reason ``parse`` on a malformed line,
    ``too_many_labels`` / ``label_value_too_long`` on a breached limit."""
    limits = limits or ScrapeLimits()
    cache = cache if cache is not None else SeriesCache(limits.cache_bytes)
    counters: dict[Role, dict[str, float]] = {}
    gauges: dict[Role, dict[str, float]] = {}
    hist: dict[Role, dict[str, tuple[list[tuple[float, float]], dict[str, float]]]] = {}
    seen: set[tuple[Role, str, str, float | None]] = set()
    duplicates = 0
    fullmatch = _LINE.fullmatch
    entries = cache.entries
    for line in lines:
        m = fullmatch(line)
        if m is None:
            raise ParseError("parse", f"bad sample line {line[:80]!r}")
        name, raw, text = m.group(1, 2, 3)
        k = (name, raw or b"")
        info = entries.get(k, _MISS)
        if info is _MISS:
            info = _info(roles, k, line, cache, limits)
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


FEED_BYTES = 65536
"""Bytes per :meth:`LineFilter.feed` of :func:`parse_text` (the size of the HTTP reader's chunks)."""


def parse_text(body: bytes, roles: MetricRoles, limits: ScrapeLimits | None = None,
               cache: SeriesCache | None = None) -> Parsed:
    """Parse a whole body (tests, tools), fed in :data:`FEED_BYTES` pieces; same rules and errors as
    :class:`LineFilter`, except the body size limit (the reader's)."""
    f = LineFilter(roles, cache, limits)
    for pos in range(0, len(body), FEED_BYTES):
        f.feed(body[pos:pos + FEED_BYTES])
    return f.finish()
