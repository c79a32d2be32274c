"""``OWNED_FLAGS`` (the CEL guard of spec.extraArgs) lists every spelling of each flag the typed fields render,
in every supported release's flag table."""

from __future__ import annotations

from sglang_operator.api.spec import OWNED_FLAGS, owned_by_typed_field
from sglang_operator.sglang.flags import load_table
from sglang_operator.sglang.versions import SUPPORTED


def test_owned_flags_cover_all_aliases_in_every_release() -> None:
    for version in SUPPORTED:
        table = load_table(version)
        for flag in OWNED_FLAGS:
            spec = table.get(flag)
            if spec is None:
                continue  # renamed in this release (e.g. --mamba-scheduler-strategy on 0.5.23)
            missing = set(spec.options) - set(OWNED_FLAGS)
            assert not missing, f"{version}: {flag} also spelled {missing}"


def test_every_owned_flag_exists_in_some_release() -> None:
    for flag in OWNED_FLAGS:
        assert any(flag in load_table(v) for v in SUPPORTED), flag


def test_abbreviations_and_values() -> None:
    assert owned_by_typed_field("--tp") == "--tp-size"
    assert owned_by_typed_field("--context-length=8192") == "--context-length"
    assert owned_by_typed_field("--page-size") is None
    assert owned_by_typed_field("--enable-metrics-for-all-schedulers") is None
    assert owned_by_typed_field("64") is None
