"""SGLang-format log lines.

Format from ``python/sglang/srt/utils/common.py:configure_logger``: ``[%(asctime)s{prefix}] %(message)s`` with
datefmt ``%Y-%m-%d %H:%M:%S`` (``SGLANG_LOG_MS=1`` adds ``.mmm``); prefix `` TP{t}`` when tp > 1, `` DP{d}``
with DP (``python/sglang/srt/managers/scheduler.py``). Warnings go through the same format with
``WARNING`` handling left to Python's logging in SGLang; the simulator writes everything to stderr.
The decode line follows ``report_decode_stats`` (0.5.10 ``observability/scheduler_metrics_mixin.py``,
0.5.23 ``managers/scheduler_components/metrics_reporter.py``).
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class SimLogger:
    """Writes ``[timestamp{prefix}] message`` lines to ``stream`` (stderr by default) and keeps the last
    ``keep`` lines in memory for tests."""

    def __init__(self, stream: TextIO | None = None, log_ms: bool = False, keep: int = 500) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.log_ms = log_ms
        self.keep = keep
        self.lines: list[str] = []

    def log(self, message: str, prefix: str = "") -> str:
        """Write one line; ``prefix`` is e.g. ``" TP0"``. Returns the line written (without newline)."""
        now = time.time()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        if self.log_ms:
            stamp += f".{int(now * 1000) % 1000:03d}"
        line = f"[{stamp}{prefix}] {message}"
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass
        self.lines.append(line)
        if len(self.lines) > self.keep:
            del self.lines[: len(self.lines) - self.keep]
        return line


def rank_prefix(tp_size: int, dp_size: int = 1, tp_rank: int = 0, dp_rank: int = 0) -> str:
    """The scheduler's logger prefix (``python/sglang/srt/managers/scheduler.py``)."""
    prefix = ""
    if dp_size > 1:
        prefix += f" DP{dp_rank}"
    if tp_size > 1:
        prefix += f" TP{tp_rank}"
    return prefix


def usage_parts(hybrid_mamba: bool, used_tokens: int, token_usage: float, mamba_num: int,
                mamba_usage: float) -> str:
    """Pool usage part of the decode/prefill line (``pool_stats_observer.get_decode_usage_msg_parts``)."""
    if hybrid_mamba:
        return (f"#full token: {used_tokens}, full token usage: {token_usage:.2f}, "
                f"mamba num: {mamba_num}, mamba usage: {mamba_usage:.2f}")
    return f"#token: {used_tokens}, token usage: {token_usage:.2f}"


def decode_line(running: int, usage: str, spec: tuple[float, float] | None, gen_throughput: float,
                queued: int, cuda_graph: bool = True) -> str:
    """``Decode batch, #running-req: N, <usage>, [accept len: x, accept rate: y, ]cuda graph: B,
    gen throughput (token/s): T, #queue-req: Q``."""
    msg = f"Decode batch, #running-req: {running}, {usage}, "
    if spec is not None:
        msg += f"accept len: {spec[0]:.2f}, accept rate: {spec[1]:.2f}, "
    msg += f"cuda graph: {cuda_graph}, gen throughput (token/s): {gen_throughput:.2f}, #queue-req: {queued}"
    return msg


def prefill_line(new_seq: int, new_token: int, usage: str, running: int, queued: int,
                 input_throughput: float) -> str:
    """``Prefill batch, #new-seq: N, #new-token: N, #cached-token: 0, <usage>, #running-req: N,
    #queue-req: N, cuda graph: False, input throughput (token/s): T`` (the scheduler's prefill stats line)."""
    return (f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_token}, #cached-token: 0, {usage}, "
            f"#running-req: {running}, #queue-req: {queued}, cuda graph: False, "
            f"input throughput (token/s): {input_throughput:.2f}")
