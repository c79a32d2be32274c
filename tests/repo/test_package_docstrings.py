"""The operator's docstrings as a map: every package's ``__init__`` docstring lists each of its modules and
subpackages (as ``:mod:`.name```), and no docstring or comment of the operator names an issue number instead of
the fact or the doc section it means."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "sglang_operator"
PACKAGES = sorted(p.parent for p in PACKAGE.rglob("__init__.py"))
ISSUE = re.compile(r"\b[Ii]ssue #?[0-9]+")
"""An issue reference (``issue 15``, ``Issue #7``): what ``grep -rnE "[Ii]ssue [0-9]+|issue #?[0-9]+"`` finds."""


def members(package: Path) -> list[str]:
    """The modules (``name.py``, ``__init__`` excluded) and subpackages (a folder with ``__init__.py``) of
    ``package``, sorted."""
    modules = [p.stem for p in package.glob("*.py") if p.name != "__init__.py"]
    subpackages = [p.parent.name for p in package.glob("*/__init__.py")]
    return sorted(modules + subpackages)


def listed(package: Path) -> set[str]:
    """The names the package's docstring lists as ``:mod:`.name``` (a relative reference to a member)."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    return set(re.findall(r":mod:`\.(\w+)`", doc))


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_package_docstring_lists_every_module(package: Path) -> None:
    missing = [name for name in members(package) if name not in listed(package)]
    assert not missing, f"{package.relative_to(PACKAGE.parent)}/__init__.py: its docstring lists no {missing}"


def test_package_docstring_lists_no_module_that_is_gone() -> None:
    stale = {str(p.relative_to(PACKAGE.parent)): sorted(listed(p) - set(members(p))) for p in PACKAGES}
    assert not {k: v for k, v in stale.items() if v}


def test_no_issue_numbers_in_operator_code() -> None:
    found = [f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), start=1) if ISSUE.search(line)]
    assert not found, "name the fact or the doc section instead:\n" + "\n".join(found)


def test_the_checks_catch_what_they_look_for(tmp_path: Path) -> None:
    (tmp_path / "__init__.py").write_text('"""A package: :mod:`.kept`."""\n')
    (tmp_path / "kept.py").write_text("")
    (tmp_path / "forgotten.py").write_text("")
    assert sorted(set(members(tmp_path)) - listed(tmp_path)) == ["forgotten"]
    assert ISSUE.search("(issue 15, item 2)") and ISSUE.search("Issue #7") and not ISSUE.search("tissue 5g")
