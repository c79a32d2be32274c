"""Generation endpoints: ``POST /generate`` (SGLang native), ``/v1/completions``, ``/v1/chat/completions``
(OpenAI-compatible, SSE streaming and not, with ``usage``) and ``GET /v1/models``.

Shapes follow ``python/sglang/srt/entrypoints/openai/protocol.py`` and ``serving_chat.py`` /
``serving_completions.py`` (0.5.10 and 0.5.23): ``chat.completion(.chunk)`` / ``text_completion`` objects,
``matched_stop``, a final usage chunk when ``stream_options.include_usage`` is true, ``data: [DONE]``.
``/generate`` streams cumulative ``text`` with ``meta_info`` (``spec_verify_ct``, ``spec_accept_length`` ...).
Prompt tokens are estimated as characters / 4; without ``max_tokens`` a request ends with ``stop`` after a
seeded natural length (200–600 tokens).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web

from sglang_sim import hostile, perf
from sglang_sim.engine import SimRequest
from sglang_sim.state import SIM_KEY, SimState

DEFAULT_MAX_NEW_TOKENS = 128  # SamplingParams.max_new_tokens default (python/sglang/srt/sampling/sampling_params.py)


def openai_error(message: str, status: int = 400, kind: str = "BadRequestError") -> web.Response:
    """SGLang's OpenAI-style error body (``protocol.py:ErrorResponse``)."""
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return web.json_response(body, status=status)


def _tokens_of(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        data = await request.json()
    except ValueError as exc:
        raise web.HTTPBadRequest(text=json.dumps({"object": "error", "message": f"Invalid JSON: {exc}",
                                                   "type": "BadRequestError", "param": None, "code": 400}),
                                 content_type="application/json") from exc
    if not isinstance(data, dict):
        raise web.HTTPBadRequest(text='{"error": "request body must be a JSON object"}',
                                 content_type="application/json")
    return data


def _new_request(sim: SimState, prompt_tokens: int, max_tokens: Any, stream: bool, ignore_eos: bool) -> SimRequest:
    natural: int | None = None
    if max_tokens is None:
        max_tokens = max(sim.plan.context_len - prompt_tokens, 1)
        if not ignore_eos:
            natural = sim.engine.rng.randint(200, 600)
    req = SimRequest(uuid.uuid4().hex, prompt_tokens, int(max_tokens), stream, natural)
    sim.engine.submit(req)
    return req


def _meta(sim: SimState, req: SimRequest) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": req.rid, "finish_reason": {"type": req.finish_reason or "length", "length": req.generated}
        if req.finished else None,
        "prompt_tokens": req.prompt_tokens, "completion_tokens": req.generated, "cached_tokens": 0,
        "e2e_latency": (req.finished_at or sim.engine.vnow) - req.arrival,
    }
    shape = sim.engine.cfg.shape
    if shape is not None and req.verify_ct:
        length = (req.accepted_drafts + req.verify_ct) / req.verify_ct
        meta.update(spec_verify_ct=req.verify_ct, spec_accept_length=length,
                    spec_accept_rate=perf.accept_rate(length, shape, sim.facts.accept_rate_formula),
                    spec_num_correct_drafts=req.accepted_drafts,
                    spec_num_proposed_drafts=req.verify_ct * (shape.num_draft_tokens - 1))
    return meta


def _usage(req: SimRequest) -> dict[str, Any]:
    return {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens + req.generated,
            "completion_tokens": req.generated, "prompt_tokens_details": None}


async def _wait_done(req: SimRequest) -> None:
    while not req.published_finished:
        req.event.clear()
        if req.published_finished:
            break
        await req.event.wait()


async def _stream(request: web.Request, req: SimRequest, piece: Callable[[str, bool], bytes | None],
                  tail: Callable[[], bytes] | None = None) -> web.StreamResponse:
    """Write one SSE event per engine chunk (``piece(text, last)``), then ``tail()`` and ``[DONE]``."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    sent = 0
    try:
        while True:
            req.event.clear()
            chunks = req.chunks[sent:req.published_chunks]
            sent += len(chunks)
            done = req.published_finished
            out = b"".join(filter(None, (piece("".join(c), done and i == len(chunks) - 1)
                                         for i, c in enumerate(chunks))))
            if done and not chunks:
                out += piece("", True) or b""
            if out:
                await resp.write(out)
            if done:
                break
            await req.event.wait()
        await resp.write((tail() if tail else b"") + b"data: [DONE]\n\n")
    except (ConnectionResetError, OSError):
        req.aborted = True
        raise
    finally:
        if not req.finished:
            req.aborted = True
    return resp


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


async def generate(request: web.Request) -> web.StreamResponse:
    """``POST /generate``: ``{"text"|"input_ids", "sampling_params", "stream"}``."""
    sim = request.app[SIM_KEY]
    body = await _body(request)
    params = body.get("sampling_params") or {}
    ids = body.get("input_ids")
    prompt = len(ids) if isinstance(ids, list) else _tokens_of(str(body.get("text", "")))
    stream = bool(body.get("stream"))
    req = _new_request(sim, prompt, params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS), stream,
                       bool(params.get("ignore_eos")))
    if not stream:
        await _wait_done(req)
        return web.json_response({"text": "".join("".join(c) for c in req.chunks), "meta_info": _meta(sim, req)})
    text: list[str] = []

    def piece(t: str, last: bool) -> bytes:
        text.append(t)
        return _sse({"text": "".join(text), "meta_info": _meta(sim, req), "index": 0})
    return await _stream(request, req, piece)


async def completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/completions`` (OpenAI)."""
    return await _openai(request, chat=False)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/chat/completions`` (OpenAI)."""
    return await _openai(request, chat=True)


async def _openai(request: web.Request, chat: bool) -> web.StreamResponse:
    sim = request.app[SIM_KEY]
    body = await _body(request)
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return openai_error("messages must be a non-empty list")
        prompt = sum(_tokens_of(str(m.get("content", ""))) + 4 for m in messages if isinstance(m, dict)) + 3
    else:
        if "prompt" not in body:
            return openai_error("prompt is required")
        prompt = _tokens_of(str(body["prompt"]))
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    stream = bool(body.get("stream"))
    mode = sim.faults.probe_mode
    if stream and mode != "ok":  # hostile (sglang_sim.faults): never reaches the engine
        if mode == "instant":  # counted as a finished streamed request of one token, no engine time
            st = sim.engine.stats
            st.num_requests["true"] += 1
            st.prompt_tokens["true"] += prompt
            st.generation_tokens["true"] += 1
        blocks = hostile.endless_line(sim.faults.probe_line_mb, chat) if mode == "endless_line" \
            else hostile.tiny_chunks(sim.faults.probe_chunks, chat) if mode == "tiny_chunks" \
            else hostile.instant(chat)
        return await hostile.write_blocks(request, blocks, "text/event-stream")
    req = _new_request(sim, prompt, max_tokens, stream, bool(body.get("ignore_eos")))
    rid = ("chatcmpl-" if chat else "cmpl-") + req.rid
    created = int(time.time())
    model = sim.served_model_name
    if not stream:
        await _wait_done(req)
        text = "".join("".join(c) for c in req.chunks)
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": req.finish_reason,
                                  "matched_stop": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": text, "reasoning_content": None,
                                 "tool_calls": None}
        else:
            choice["text"] = text
        return web.json_response({"id": rid, "object": "chat.completion" if chat else "text_completion",
                                  "created": created, "model": model, "choices": [choice],
                                  "usage": _usage(req), "metadata": {"weight_version": "default"}})
    kind = "chat.completion.chunk" if chat else "text_completion"
    first = [chat]

    def piece(t: str, last: bool) -> bytes:
        out = b""
        if first[0]:
            first[0] = False
            out += _sse({"id": rid, "object": kind, "created": created, "model": model, "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                 "finish_reason": None, "matched_stop": None}], "usage": None})
        c: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": req.finish_reason if last else None,
                             "matched_stop": None}
        if chat:
            c["delta"] = {"content": t} if t else {}
        else:
            c["text"] = t
        return out + _sse({"id": rid, "object": kind, "created": created, "model": model, "choices": [c],
                           "usage": None})
    opts = body.get("stream_options") or {}

    def usage_chunk() -> bytes:
        return _sse({"id": rid, "object": kind, "created": created, "model": model, "choices": [],
                     "usage": _usage(req)})
    with_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
    return await _stream(request, req, piece, usage_chunk if with_usage else None)


async def models(request: web.Request) -> web.Response:
    """``GET /v1/models``: the served model with ``max_model_len`` = context length."""
    sim = request.app[SIM_KEY]
    name = sim.served_model_name
    return web.json_response({"object": "list", "data": [
        {"id": name, "object": "model", "created": int(sim.started_wall), "owned_by": "sglang", "root": name,
         "parent": None, "max_model_len": sim.plan.context_len}]})
