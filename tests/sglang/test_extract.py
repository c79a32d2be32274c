"""Re-check the committed flag/metric tables against freshly downloaded SGLang wheels (needs PyPI).

A failed download fails the test (it is not skipped): the committed data must stay provably in sync.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from sglang_operator.sglang.extract import build_tables, download_wheel, dump_json
from sglang_operator.sglang.versions import SUPPORTED


@pytest.mark.network
@pytest.mark.parametrize("version", [str(v) for v in SUPPORTED])
def test_committed_tables_equal_fresh_extraction(version: str, tmp_path: Path) -> None:
    wheel = download_wheel(version, tmp_path)
    flags_doc, metrics_doc = build_tables(wheel, version)
    data = resources.files("sglang_operator.sglang") / "data"
    assert (data / f"flags-{version}.json").read_text(encoding="utf-8") == dump_json(flags_doc)
    assert (data / f"metrics-{version}.json").read_text(encoding="utf-8") == dump_json(metrics_doc)
