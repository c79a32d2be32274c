"""The Python half of the invalid-spec table (e2e/tests/test_invalid_specs.py) without a cluster: every case is
refused by the operator's own validation with its expected message; the valid base spec passes; the table walks
every validation rule (each CEL rule of the models and each release-dependent Python rule), and every refusal
names a field and the offending value."""

from __future__ import annotations

import pytest

from e2e.tests.test_invalid_specs import CASES, Case, python_errors, python_rules, valid_server, valid_tuning
from sglang_operator.api.base import ApiModel, CelRule
from sglang_operator.builders.validate import PYTHON_RULES


def _models(base: type) -> list[type[ApiModel]]:
    out: list[type[ApiModel]] = []
    for sub in base.__subclasses__():
        out += [sub, *_models(sub)]
    return out


def _cel_rules() -> list[CelRule]:
    return list(dict.fromkeys(r for cls in _models(ApiModel) for r in cls.cel_rules))


def test_valid_base_spec_has_no_errors() -> None:
    assert python_errors(valid_server()) == []
    assert python_errors(valid_tuning()) == []


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_python_validation_refuses(c: Case) -> None:
    errors = python_errors(c.body())
    assert any(c.python in e for e in errors), errors


@pytest.mark.parametrize("c", [c for c in CASES if c.server is not None and c.server == c.python],
                         ids=lambda c: c.id)
def test_cel_and_python_messages_agree(c: Case) -> None:
    """For CEL rules the SpecValid message and the API server's message are the same text."""
    assert any(e.startswith(("spec.", "metadata.")) and c.server in e for e in python_errors(c.body()))


def test_the_table_walks_every_cel_rule() -> None:
    rules = _cel_rules()
    assert len(rules) >= 14
    covered = {c.rule for c in CASES}
    missing = [r.name or r.message for r in rules
               if not (r.name in covered if r.name else any(r.message.startswith(k) for k in covered))]
    assert missing == [], "add a case to e2e/tests/test_invalid_specs.py for each"


def test_the_table_walks_every_python_rule() -> None:
    for rule in PYTHON_RULES:
        cases = [c for c in CASES if c.rule == rule]
        assert cases, f"no case for {rule}"
        for c in cases:
            assert rule in python_rules(c.body()), c.id


@pytest.mark.parametrize("c", [c for c in CASES if c.value], ids=lambda c: c.id)
def test_every_refusal_names_a_field_and_the_offending_value(c: Case) -> None:
    errors = python_errors(c.body())
    assert any(("spec." in e or "metadata." in e) and c.value in e for e in errors), (c.value, errors)


def test_named_rules_fill_in_their_values() -> None:
    """Every named CEL rule has a messageExpression and a Python twin (CelRule.explain)."""
    for r in _cel_rules():
        if r.name:
            assert r.message_expression and r.explain is not None, r.name
