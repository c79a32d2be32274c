"""``scripts/ci_budget.py`` (issue 40 item 1): every stage ``.ci/run`` announces has a row in the budget table of
``docs/development.md``, and a run's output becomes stages timed from one marker to the next."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ci_budget", ROOT / "scripts" / "ci_budget.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


ci = _script()


def announced() -> list[str]:
    """The stage names of ``.ci/run``'s ``say "..."`` lines (shell expansions left as written), ``done`` excluded."""
    names = re.findall(r'^say "(.*)"\s*$', (ROOT / ".ci" / "run").read_text(), flags=re.M)
    return [n.replace("\\$", "$") for n in names if n != "done"]


def test_every_stage_of_the_ci_script_has_a_budget_row() -> None:
    rows = ci.budgets((ROOT / "docs" / "development.md").read_text())
    names = announced()
    assert len(names) >= 15, names
    missing = [n for n in names if ci.budget_of(ci.Stage(n, 0), rows) is None]
    assert not missing, f"stages of .ci/run without a row in docs/development.md's stage budget: {missing}"
    total = next(r for r in rows if r.prefix == ci.TOTAL)
    assert total.cold <= 75 * 60 and total.warm <= 35 * 60  # the goals the docs state


def test_a_run_becomes_stages_from_one_marker_to_the_next_and_the_total_is_judged() -> None:
    out = ["noise", "=== [   0s] python environment", "x", "=== [  87s] types: mypy strict (the operator)",
           "=== [ 100s] tests (the test command, docs/development.md)", "=== [2700s] done"]
    run = ci.stages(out)
    assert [(s.name, s.seconds) for s in run] == [
        ("python environment", 87), ("types: mypy strict (the operator)", 13),
        ("tests (the test command, docs/development.md)", 2600)]
    rows = [ci.Budget("python environment", 150, 120), ci.Budget("types: mypy", 150, 90),
            ci.Budget("tests", 1900, 1900), ci.Budget(ci.TOTAL, 4500, 2100)]
    table, within = ci.report(run, rows, cold=False)
    assert not within and "| tests (the test command, docs/development.md) | 2600 | 1900 | +700 |" in table
    assert "**2700**" in table
    _, within_cold = ci.report(run, rows, cold=True)
    assert within_cold


def test_a_cut_short_run_ends_at_its_last_marker_and_no_table_means_an_error() -> None:
    assert ci.stages(["=== [   0s] python environment", "=== [  5s] Go toolchain"]) == [
        ci.Stage("python environment", 5)]
    try:
        ci.budgets("# no table here\n")
    except ValueError as e:
        assert "stage budget" in str(e)
    else:
        raise AssertionError("a docs page without the table was accepted")
