"""The hostile bodies of :mod:`sglang_sim.faults` (issue 16: a pod runs any image, so the operator must survive
whatever it answers): made block by block as they are written, never whole.

Every generator yields ``bytes`` blocks of at most :data:`~sglang_sim.faults.BLOCK_BYTES` (one reused block where
the content repeats), so a request holds one block at a time; :func:`write_blocks` writes them to a chunked
response, each write waiting for the socket to drain, and stops quietly when the client goes away (as the
operator does once a bound is reached).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from aiohttp import web

from sglang_sim.faults import BLOCK_BYTES

MIB = 1024 * 1024
WANTED = "sglang:num_running_reqs"
"""The gauge the hostile series are added to: one the operator's sampler reads at every release (``Role.RUNNING_
REQUESTS``), so its limits on samples, labels and label values apply to them."""
SERIES_PER_BLOCK = 1000
"""Series of :func:`many_series` made per block (about 130 KiB)."""
TINY_CHUNKS_PER_BLOCK = 1024
"""Chunks of :func:`tiny_chunks` per block (each chunk is about 60 bytes)."""


def _labels_of(text: str) -> str:
    """The label set (inside the braces) of the first :data:`WANTED` sample of ``text``, or ``""``."""
    at = text.find("\n" + WANTED + "{")
    if at == -1:
        return ""
    start = at + len(WANTED) + 2
    end = text.find("}", start)
    return text[start:end] if end != -1 else ""


def _with(labels: str, extra: str) -> str:
    return f"{labels},{extra}" if labels else extra


def _repeat(fill: bytes, total: int) -> Iterator[bytes]:
    """``total`` bytes of ``fill`` repeated, as one reused block of :data:`BLOCK_BYTES` (the last one shorter)."""
    block = (fill * (BLOCK_BYTES // len(fill) + 1))[:BLOCK_BYTES]
    left = total
    while left > 0:
        yield block if left >= len(block) else block[:left]
        left -= len(block)


def long_label(text: str, megabytes: float) -> Iterator[bytes]:
    """The real exposition ``text``, then one more :data:`WANTED` sample with the label ``evil`` of ``megabytes``
    MiB of ``v`` (a valid line: the operator can only tell by its length)."""
    yield text.encode()
    yield f'{WANTED}{{{_with(_labels_of(text), "evil=")}"'.encode()
    yield from _repeat(b"v", int(megabytes * MIB))
    yield b'"} 1.0\n'


def many_series(text: str, count: int) -> Iterator[bytes]:
    """The real exposition ``text``, then ``count`` more series of :data:`WANTED` (label ``series="<i>"``), made
    :data:`SERIES_PER_BLOCK` at a time."""
    yield text.encode()
    head = f'{WANTED}{{{_with(_labels_of(text), "series=")}"'
    for first in range(0, count, SERIES_PER_BLOCK):
        yield "".join(f'{head}{i}"}} 1.0\n' for i in range(first, min(first + SERIES_PER_BLOCK, count))).encode()


def endless_line(megabytes: float, chat: bool) -> Iterator[bytes]:
    """A streamed answer whose first ``data:`` line is ``megabytes`` MiB long (the content of one JSON chunk: a
    chat ``delta`` or a completion ``text``), then ``[DONE]``."""
    yield b'data: {"choices":[{"index":0,' + (b'"delta":{"content":"' if chat else b'"text":"')
    yield from _repeat(b"x", int(megabytes * MIB))
    yield b'"}]}\n\n' if not chat else b'"}}]}\n\n'
    yield b"data: [DONE]\n\n"


def tiny_chunks(count: int, chat: bool) -> Iterator[bytes]:
    """A streamed answer of ``count`` valid chunks of one character each, then a usage chunk and ``[DONE]``; one
    block of :data:`TINY_CHUNKS_PER_BLOCK` chunks is made once and written again and again."""
    one = (b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n' if chat
           else b'data: {"choices":[{"index":0,"text":"x"}]}\n\n')
    block = one * TINY_CHUNKS_PER_BLOCK
    left = count
    while left > 0:
        n = min(left, TINY_CHUNKS_PER_BLOCK)
        yield block if n == TINY_CHUNKS_PER_BLOCK else one * n
        left -= n
    yield (b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":%d,"total_tokens":%d}}\n\n'
           % (count, count + 1))
    yield b"data: [DONE]\n\n"


def instant(chat: bool) -> Iterator[bytes]:
    """A streamed answer given at once: one content chunk of one token, a usage chunk (``completion_tokens`` 1) and
    ``[DONE]``, as one block (no engine time: what a pod answering at once sends)."""
    one = (b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"x"}}]}\n\n' if chat
           else b'data: {"choices":[{"index":0,"text":"x"}]}\n\n')
    yield (one + b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}\n\n'
           + b"data: [DONE]\n\n")


async def write_blocks(request: web.Request, blocks: Iterable[bytes], content_type: str) -> web.StreamResponse:
    """Write ``blocks`` as one chunked HTTP 200 answer of ``content_type``; a client that goes away ends it."""
    resp = web.StreamResponse(headers={"Content-Type": content_type, "Cache-Control": "no-cache"})
    await resp.prepare(request)
    try:
        for block in blocks:
            await resp.write(block)
        await resp.write_eof()
    except (ConnectionResetError, OSError):
        pass  # the client stopped reading (a bound of the operator's): nothing more to send
    return resp
