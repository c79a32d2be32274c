"""The committed per-release data (``data/releases.json``, ``flags.json``, ``metrics.json``).

Offline: the three files are exactly what :func:`_store.encode` makes of their decoded content (so they were
written by ``scripts/extract_sglang.py``, not edited by hand), every PyPI release 0.4.6 … 0.5.23 is there with a
wheel sha256, and the installed data stays under 3 MB.

``network``: re-download a sample of wheels and compare a fresh static extraction with the committed record of
that release — one release per parser era and metrics-collector layout, plus a post-release: 0.4.6 (oldest,
``sglang/srt/metrics/collector.py``), 0.4.9.post6 (post-release), 0.5.9 (last ``metrics/collector.py``),
0.5.13 (last hand-written ``add_argument`` era), 0.5.17 (alias era), 0.5.23 (msgspec fields).
A failed download fails the test (it is not skipped). ``scripts/extract_sglang.py --check`` re-checks all 62.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import pytest
from sglang_operator_tools.extract import build_release, download_wheel, sha256_of

from sglang_operator.sglang import _store, catalog
from sglang_operator.sglang.versions import parse_version

DATA = resources.files("sglang_operator.sglang") / "data"
SAMPLE = ["0.4.6", "0.4.9.post6", "0.5.9", "0.5.13", "0.5.17", "0.5.23"]
# `pip index versions sglang`, 2026-12-01, filtered to 0.4.6 … 0.5.23 (62 releases, post-releases included)
PYPI = ["0.4.6", "0.4.6.post1", "0.4.6.post2", "0.4.6.post3", "0.4.6.post4", "0.4.6.post5", "0.4.7", "0.4.7.post1",
        "0.4.8", "0.4.8.post1", "0.4.9", "0.4.9.post1", "0.4.9.post2", "0.4.9.post3", "0.4.9.post4", "0.4.9.post5",
        "0.4.9.post6", "0.4.10", "0.4.10.post1", "0.4.10.post2", "0.5.1", "0.5.1.post1", "0.5.1.post2",
        "0.5.1.post3", "0.5.2", "0.5.3", "0.5.3.post1", "0.5.3.post2", "0.5.3.post3", "0.5.4", "0.5.4.post1",
        "0.5.4.post2", "0.5.4.post3", "0.5.5", "0.5.5.post1", "0.5.5.post2", "0.5.5.post3", "0.5.6", "0.5.6.post1",
        "0.5.6.post2", "0.5.7", "0.5.8", "0.5.8.post1", "0.5.9", "0.5.10", "0.5.10.post1", "0.5.11", "0.5.12",
        "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18",
        "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"]


def _committed() -> dict[str, str]:
    return {name: (DATA / name).read_text(encoding="utf-8") for name in _store.FILES}


def test_committed_files_are_the_canonical_encoding_of_their_content() -> None:
    files = _committed()
    docs = _store.decode(*(json.loads(files[n]) for n in _store.FILES))
    assert _store.encode(docs) == files


def test_every_pypi_release_from_0_4_6_to_0_5_23_has_data_with_its_wheel_sha256() -> None:
    known = [str(r.version) for r in catalog.releases()]
    assert known == PYPI
    for r in catalog.releases():
        assert re.fullmatch(r"[0-9a-f]{64}", r.wheel_sha256), r.version
        assert r.wheel.startswith(f"sglang-{r.version}-") and r.wheel.endswith(".whl")
        assert catalog.flag_records(r.version) and catalog.metric_records(r.version)


def test_post_releases_share_their_base_table_unless_their_flags_differ() -> None:
    by = {str(r.version): r for r in catalog.releases()}
    assert by["0.4.9.post6"].flags_table == parse_version("0.4.9.post6")  # its own: flags differ from post5
    assert by["0.5.1.post2"].flags_table == parse_version("0.5.1")  # identical flags: one table, one parser
    assert by["0.5.10.post1"].flags_table == parse_version("0.5.10")
    for r in catalog.releases():
        same = catalog.flag_records(r.version) == catalog.flag_records(r.flags_table)
        assert same and r.flags_table <= r.version


def test_installed_data_stays_under_3_mb() -> None:
    total = sum(len(text.encode()) for text in _committed().values())
    assert total < 3 * 1024 * 1024, total


@pytest.mark.network
@pytest.mark.parametrize("version", SAMPLE)
def test_committed_release_equals_fresh_extraction(version: str, tmp_path: Path) -> None:
    wheels = Path.home() / ".cache" / "sglang-operator" / "wheels"
    wheel = download_wheel(version, wheels if wheels.is_dir() else tmp_path)
    committed = catalog.release_doc(parse_version(version))
    assert sha256_of(wheel) == committed["wheel_sha256"]
    fresh = build_release(wheel, version)
    assert fresh == committed
