"""``OWNED_FLAGS`` (the CEL guard of spec.extraArgs) lists every spelling of each flag the typed fields render,
in every supported release's flag table."""

from __future__ import annotations

from sglang_operator.api.spec import NOT_ABBREVIATIONS, OWNED_FLAGS, owned_by_typed_field
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


def test_not_abbreviations_are_exactly_the_real_flags_prefixing_an_owned_one() -> None:
    """A real, unowned flag that is a prefix of an owned flag (``--ssl-keyfile`` of ``--ssl-keyfile-password``) must
    not be refused as an abbreviation: argparse matches it exactly. NOT_ABBREVIATIONS lists all of them."""
    prefixes: set[str] = set()
    for version in SUPPORTED:
        for spec in load_table(version).flags:
            prefixes |= {o for o in spec.options
                         if o not in OWNED_FLAGS and any(f.startswith(o) for f in OWNED_FLAGS)}
    assert prefixes == set(NOT_ABBREVIATIONS)
    assert all(owned_by_typed_field(o) is None for o in NOT_ABBREVIATIONS)
    assert owned_by_typed_field("--ssl-keyfile-pass") == "--ssl-keyfile-password"
    assert owned_by_typed_field("--ssl-key") == "--ssl-keyfile-password"  # ambiguous for argparse anyway
