"""The parser's memory of one pod's sample lines between scrapes (the same series come back every interval),
bounded by bytes: what each entry keeps (the sample name, the raw label text, the series key) plus a fixed
:data:`ENTRY_OVERHEAD` for Python's objects. One cache per scraped pod (held by the sampler's state, dropped when
the pod or its server goes away), so one pod's label sets never crowd out, or outlive, another's."""

from __future__ import annotations

from typing import Any

ENTRY_OVERHEAD = 200
"""Bytes counted per entry on top of its text: the dict slot, the key and value tuples, the bytes and str headers."""


class SeriesCache:
    """``(sample name, raw labels) → parsed line info`` holding at most ``max_bytes`` (see the module docstring).

    A new entry that does not fit empties the cache first (the next scrapes fill it again); an entry larger than
    ``max_bytes`` on its own is not kept. Raises ``ValueError`` when ``max_bytes`` is below 1.
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError(f"cache size must be positive, not {max_bytes}")
        self.max_bytes = max_bytes
        self.size = 0
        self.entries: dict[tuple[bytes, bytes], Any] = {}
        """The entries (read them here, on the parser's hot path; add them with :meth:`put` only)."""

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, key: tuple[bytes, bytes]) -> bool:
        return key in self.entries

    def put(self, key: tuple[bytes, bytes], value: Any, text_bytes: int) -> None:
        """Remember ``value`` for ``key``; ``text_bytes``: the bytes of text ``value`` holds besides ``key``."""
        cost = len(key[0]) + len(key[1]) + text_bytes + ENTRY_OVERHEAD
        if cost > self.max_bytes or key in self.entries:
            return
        if self.size + cost > self.max_bytes:
            self.clear()
        self.entries[key] = value
        self.size += cost

    def clear(self) -> None:
        """Forget every entry."""
        self.entries.clear()
        self.size = 0
