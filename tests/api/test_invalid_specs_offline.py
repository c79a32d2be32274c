"""The Python half of the invalid-spec table (e2e/tests/test_invalid_specs.py) without a cluster: every case is
refused by the operator's own validation with its expected message; the valid base spec passes."""

from __future__ import annotations

import pytest

from e2e.tests.test_invalid_specs import CASES, Case, python_errors, valid_server


def test_valid_base_spec_has_no_errors() -> None:
    assert python_errors(valid_server()) == []


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_python_validation_refuses(c: Case) -> None:
    errors = python_errors(c.body())
    assert any(c.python in e for e in errors), errors


@pytest.mark.parametrize("c", [c for c in CASES if c.server is not None and c.server == c.python],
                         ids=lambda c: c.id)
def test_cel_and_python_messages_agree(c: Case) -> None:
    """For CEL rules the SpecValid message and the API server's message are the same text."""
    assert any(e.startswith(("spec.", "metadata.")) and c.server in e for e in python_errors(c.body()))
