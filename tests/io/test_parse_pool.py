"""Issue 42: the parse of a scrape's kept lines in a worker process gives what the parse on the loop gives (the
compact scrape, its errors with the same reasons), with the CPU seconds it took; a dead worker fails one parse."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from expo import SCHED, exposition

from sglang_operator.decisions.sampling.limits import ScrapeLimits
from sglang_operator.decisions.sampling.parse import Kept, KeptFilter, parse_text
from sglang_operator.decisions.sampling.retain import compact
from sglang_operator.decisions.sampling.roles import roles_for
from sglang_operator.io.parse_pool import WORKER_LOST, ParsePool, parse_kept
from sglang_operator.sglang.versions import parse_version

ROLES = roles_for(parse_version("0.5.23"))


def _kept(body: bytes, limits: ScrapeLimits) -> Kept:
    f = KeptFilter(ROLES, limits)
    for pos in range(0, len(body), 4096):
        f.feed(body[pos:pos + 4096])
    return f.finish()


async def test_a_parse_in_the_pool_is_the_parse_on_the_loop() -> None:
    limits = ScrapeLimits()
    body = exposition(gen=1000.0, verify=400, running=2, accept_rate=0.6, itl=(0, 0, 1000, 0, 0, 0, 0, 0),
                      itl_sum=20.0, ttft=(1, 1, 0, 0, 0, 0, 0, 0), ttft_sum=0.2).encode()
    extra = ",".join(f'l{i}="x"' for i in range(100))
    bad = body + f"sglang:num_queue_reqs{{{SCHED},{extra}}} 1\n".encode()
    many = body + "".join(f'sglang:num_running_reqs{{{SCHED},series="{i}"}} 1\n' for i in range(300)).encode()
    pool = ParsePool(1)
    try:
        kept = _kept(body, limits)
        inline, there = parse_kept(kept, ROLES, limits), await pool.parse(kept, ROLES, limits)
        assert there.parsed is not None and there.parsed == inline.parsed
        assert there.parsed == compact(parse_text(body, ROLES, limits), limits.retained_series)
        assert there.cpu_seconds > 0 and there.reason == ""
        worse = await pool.parse(_kept(bad, limits), ROLES, limits)
        assert (worse.parsed, worse.reason, worse.retained) == (None, "too_many_labels", True)
        over = await pool.parse(_kept(many, limits), ROLES, limits)
        assert (over.parsed, over.reason, over.retained) == (None, "too_many_series", False)
        (pid,) = pool.pids()
        os.kill(pid, signal.SIGKILL)
        lost = await pool.parse(kept, ROLES, limits)
        again = await pool.parse(kept, ROLES, limits)  # a new pool
    finally:
        pool.close()
    assert lost.parsed is None and lost.reason == WORKER_LOST
    assert again.parsed == inline.parsed


async def test_a_worker_ignores_sigint_and_leaves_the_shutdown_to_the_operator() -> None:
    """A Ctrl-C to the operator's process group reaches the workers too: they keep parsing (no ``KeyboardInterrupt``
    traceback in the operator's log, no worker lost) until the operator closes the pool."""
    limits = ScrapeLimits()
    body = exposition(gen=1000.0, verify=400, running=2, accept_rate=0.6, itl=(0, 0, 1000, 0, 0, 0, 0, 0),
                      itl_sum=20.0, ttft=(1, 1, 0, 0, 0, 0, 0, 0), ttft_sum=0.2).encode()
    pool = ParsePool(1)
    try:
        kept = _kept(body, limits)
        first = await pool.parse(kept, ROLES, limits)
        (pid,) = pool.pids()
        os.kill(pid, signal.SIGINT)
        after = await pool.parse(kept, ROLES, limits)
        assert pool.pids() == [pid]
    finally:
        pool.close()
    assert after.reason == "" and after.parsed == first.parsed


def test_workers_start_at_once_and_never_import_the_operators_main(tmp_path: Path) -> None:
    """A process run as ``python -m heavy_main`` (as the operator runs, its ``__main__`` the whole CLI) starts a pool
    of 2: both workers start at its first parse, and neither imports ``heavy_main`` (each import of it writes its
    process id to a file: only the parent's is there)."""
    marks = tmp_path / "imports"
    (tmp_path / "heavy_main.py").write_text(textwrap.dedent(f"""
        import asyncio, os, pathlib
        with pathlib.Path({str(marks)!r}).open("a") as f:
            f.write(f"{{os.getpid()}}\\n")

        async def main():
            from sglang_operator.decisions.sampling.limits import ScrapeLimits
            from sglang_operator.decisions.sampling.parse import KeptFilter
            from sglang_operator.decisions.sampling.roles import roles_for
            from sglang_operator.io.parse_pool import ParsePool
            from sglang_operator.sglang.versions import parse_version
            roles, limits = roles_for(parse_version("0.5.23")), ScrapeLimits()
            f = KeptFilter(roles, limits)
            f.feed(b"sglang:num_running_reqs 1\\n")
            pool = ParsePool(2)
            try:
                await pool.parse(f.finish(), roles, limits)
                print(" ".join(map(str, pool.pids())))
            finally:
                pool.close()

        if __name__ == "__main__":
            asyncio.run(main())
        """))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    out = subprocess.run([sys.executable, "-m", "heavy_main"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    workers = out.stdout.split()
    assert len(workers) == 2, out
    imported = marks.read_text().split()
    assert len(imported) == 1 and imported[0] not in workers, (imported, workers)  # the parent's import alone
