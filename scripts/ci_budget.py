"""The CI stage budget (issue 40 item 1): run ``bash .ci/run`` on a fresh clone and print each stage's time against
the budget table in ``docs/development.md`` ("Stage budget").

    python scripts/ci_budget.py --cold        # empty tool, Go module and Go build caches: what a fresh machine pays
    python scripts/ci_budget.py --warm        # the caches this machine already has (~/.cache/sglang-operator, Go's)
    python scripts/ci_budget.py --warm --log FILE   # no run: the table for an earlier .ci/run output

The clone is of this repository's ``HEAD`` (``git clone --no-local``, so nothing uncommitted rides along), in a
temporary folder beside a link to ``../shared`` (the facts the tests read), removed afterwards unless ``--keep``.
``--cold`` points ``XDG_CACHE_HOME``, ``GOMODCACHE`` and ``GOCACHE`` at empty folders in that temporary folder (the
apt packages and pip's wheel cache stay: the machine's, as on CI). Each stage's time is the span from its
``=== [ N s] name`` line (``.ci/run``'s ``say``) to the next one; the KEDA build runs in the background from its
stage, so its cost shows in the "waiting for the KEDA build" stage. Exit status: ``.ci/run``'s; the budget is a
report, not a gate (``--strict``: 1 when a total is over its budget).
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "development.md"
MARKER = re.compile(r"^=== \[\s*(\d+)s\] (.+)$")
"""``.ci/run``'s stage line: seconds since its start, the stage's name."""
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|")
"""A row of the budget table: ``| `stage prefix` | cold s | warm s | ...``."""
TOTAL = "total"


@dataclass(frozen=True)
class Budget:
    """One row of the table: the stage's name starts with ``prefix``; ``cold`` and ``warm``: its budget, s."""

    prefix: str
    cold: int
    warm: int


@dataclass(frozen=True)
class Stage:
    """One stage of a run: ``name`` (``.ci/run``'s), ``seconds`` from its line to the next."""

    name: str
    seconds: int


def budgets(text: str) -> list[Budget]:
    """The rows of the "Stage budget" table of ``docs/development.md`` (``text``); the ``total`` row included.
    ValueError: no table."""
    rows = [Budget(m[1], int(m[2]), int(m[3])) for line in text.splitlines() if (m := ROW.match(line.strip()))]
    if not any(r.prefix == TOTAL for r in rows):
        raise ValueError("docs/development.md has no stage budget table with a `total` row")
    return rows


def stages(lines: Iterable[str]) -> list[Stage]:
    """The stages of a ``.ci/run`` output, in order, each from its marker to the next (the last marker, ``done``,
    ends the run and is not a stage). A run cut short ends at its last marker."""
    marks = [(int(m[1]), m[2].strip()) for line in lines if (m := MARKER.match(line.rstrip("\n")))]
    return [Stage(name, later - at) for (at, name), (later, _) in itertools.pairwise(marks)]


def budget_of(stage: Stage, rows: Sequence[Budget]) -> Budget | None:
    """The row whose prefix ``stage``'s name starts with (the longest such prefix), None when no row matches."""
    fits = [r for r in rows if r.prefix != TOTAL and stage.name.startswith(r.prefix)]
    return max(fits, key=lambda r: len(r.prefix), default=None)


def report(run: Sequence[Stage], rows: Sequence[Budget], cold: bool) -> tuple[str, bool]:
    """The table (stage, seconds, budget, over by) and whether the total is within its budget."""
    which = "cold" if cold else "warm"
    out = [f"| stage | s | {which} budget s | over |", "|---|---:|---:|---:|"]
    for s in run:
        b = budget_of(s, rows)
        limit = None if b is None else (b.cold if cold else b.warm)
        over = "" if limit is None or s.seconds <= limit else f"+{s.seconds - limit}"
        name = s.name[:70].replace("|", "\\|")  # a markdown cell
        shown = "(no row)" if limit is None else str(limit)
        out.append(f"| {name} | {s.seconds} | {shown} | {over} |")
    total = sum(s.seconds for s in run)
    row = next(r for r in rows if r.prefix == TOTAL)
    limit = row.cold if cold else row.warm
    out.append(f"| **total** | **{total}** ({total / 60:.1f} min) | {limit} ({limit / 60:.0f} min) | "
               f"{'' if total <= limit else f'+{total - limit}'} |")
    return "\n".join(out), total <= limit


def run_ci(cold: bool, keep: bool) -> tuple[int, list[str]]:
    """``bash .ci/run`` in a fresh clone of ``HEAD``; (its exit status, its output lines, echoed as they come)."""
    tmp = Path(tempfile.mkdtemp(prefix="sglang-ci-budget-"))
    clone = tmp / "main"
    subprocess.run(["git", "clone", "-q", "--no-local", str(ROOT), str(clone)], check=True)
    shared = (ROOT.parent / "shared").resolve()
    if shared.is_dir():
        (tmp / "shared").symlink_to(shared)
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    if cold:
        for var, sub in (("XDG_CACHE_HOME", "xdg-cache"), ("GOMODCACHE", "gomodcache"), ("GOCACHE", "gocache")):
            (tmp / sub).mkdir()
            env[var] = str(tmp / sub)
    lines: list[str] = []
    try:
        with subprocess.Popen(["bash", ".ci/run"], cwd=clone, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                lines.append(line)
        return proc.returncode, lines
    finally:
        if keep:
            print(f"kept: {tmp}")
        else:
            subprocess.run(["chmod", "-R", "u+w", str(tmp)], check=False)  # Go's module cache is read-only
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--cold", action="store_true", help="empty XDG_CACHE_HOME, GOMODCACHE and GOCACHE")
    mode.add_argument("--warm", action="store_true", help="this machine's caches")
    parser.add_argument("--log", type=Path, help="no run: report on this saved .ci/run output")
    parser.add_argument("--keep", action="store_true", help="keep the clone and its caches")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the total is over its budget")
    args = parser.parse_args(argv)
    rows = budgets(DOCS.read_text())
    if args.log:
        status, lines = 0, args.log.read_text().splitlines()
    else:
        status, lines = run_ci(args.cold, args.keep)
    table, within = report(stages(lines), rows, args.cold)
    print(f"\n.ci/run {'cold' if args.cold else 'warm'}, {os.cpu_count()} cores, exit status {status}\n{table}")
    if status == 0 and args.strict and not within:
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
