"""The pinned router's flag table (``data/router-flags.json``, smg ``ROUTER_VERSION``; issue 44 item 1).

Offline: the table loads, names the pinned version, was written by ``scripts/extract_router.py`` (its own
deterministic form), has the flags the router work relies on with the router's defaults, and the dev extra pins
the same version. ``network``: a fresh extraction from the downloaded wheel equals the committed file.
"""

from __future__ import annotations

import json
import re
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from sglang_operator.sglang import _store
from sglang_operator.sglang.flags import ROUTER_FLAGS_FILE, MatchKind, load_router_table
from sglang_operator.sglang.versions import ROUTER_IMAGE, ROUTER_PACKAGE, ROUTER_VERSION, parse_version

ROOT = Path(__file__).resolve().parents[2]
DATA = resources.files("sglang_operator.sglang") / "data" / ROUTER_FLAGS_FILE


def test_table_loads_for_the_pinned_version() -> None:
    table = load_router_table()
    assert table.version == parse_version(ROUTER_VERSION)
    assert len(table.flags) > 150
    assert f"lightseekorg/smg:{ROUTER_VERSION}" == ROUTER_IMAGE


def test_file_is_the_generators_output() -> None:
    text = DATA.read_text(encoding="utf-8")
    doc = json.loads(text)
    assert _store.dump(doc) == text
    assert doc["_generator"].startswith("python scripts/extract_router.py")
    assert doc["package"] == ROUTER_PACKAGE and doc["version"] == ROUTER_VERSION
    assert doc["wheel"].startswith(f"smg-{ROUTER_VERSION}-") and len(doc["wheel_sha256"]) == 64


@pytest.mark.parametrize(
    ("option", "default", "takes_value"),
    [
        ("--worker-urls", [], True),
        ("--policy", "cache_aware", True),
        ("--service-discovery", False, False),
        ("--service-discovery-namespace", None, True),
        ("--service-discovery-port", 80, True),
        ("--selector", None, True),
        ("--api-key", None, True),
        ("--retry-max-retries", 5, True),
        ("--retry-initial-backoff-ms", 50, True),
        ("--retry-max-backoff-ms", 30000, True),
        ("--retry-backoff-multiplier", 1.5, True),
        ("--retry-jitter-factor", 0.2, True),
        ("--disable-retries", False, False),
        ("--cb-failure-threshold", 10, True),
        ("--cb-success-threshold", 3, True),
        ("--cb-timeout-duration-secs", 60, True),
        ("--cb-window-duration-secs", 120, True),
        ("--disable-circuit-breaker", False, False),
        ("--health-check-interval-secs", 60, True),
        ("--health-check-endpoint", "/health", True),
        ("--prometheus-host", None, True),
        ("--prometheus-port", 29000, True),
    ],
)
def test_flags_the_router_work_uses(option: str, default: object, takes_value: bool) -> None:
    flag = load_router_table().get(option)
    assert flag is not None, option
    assert flag.default == default
    assert flag.takes_value is takes_value


def test_policies_and_list_flags() -> None:
    table = load_router_table()
    policy = table.get("--policy")
    assert policy is not None and policy.choices is not None
    assert {"cache_aware", "round_robin", "power_of_two", "random"} <= set(policy.choices)
    # repeatable list flags accumulate (argparse "extend"), like the Rust CLI
    for option in ("--worker-urls", "--selector"):
        flag = table.get(option)
        assert flag is not None and flag.action == "extend"
    sd = table.get("--service-discovery")
    assert sd is not None and sd.action_kwargs == {"mutually_exclusive_with": ["--discovery-provider"]}


def test_argparse_lookup_applies() -> None:
    table = load_router_table()
    assert table.match("--policy=round_robin").kind is MatchKind.EXACT
    assert table.match("--service-discovery-nam").kind is MatchKind.ABBREVIATION
    assert table.match("--service-discovery").kind is MatchKind.EXACT
    assert table.match("--no-such-router-flag").kind is MatchKind.UNKNOWN


def test_dev_extra_pins_the_same_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    dev = project["optional-dependencies"]["dev"]
    pins = [d for d in dev if re.match(rf"{ROUTER_PACKAGE}\b", d)]
    assert pins == [f"{ROUTER_PACKAGE}=={ROUTER_VERSION}"]


@pytest.mark.network
def test_fresh_extraction_matches(tmp_path: Path) -> None:
    from sglang_operator_tools.extract.router import build_router_table, download_router_wheel

    doc = json.loads(DATA.read_text(encoding="utf-8"))
    fresh = build_router_table(download_router_wheel(ROUTER_VERSION, tmp_path), ROUTER_VERSION, doc["_generator"])
    assert _store.dump(fresh) == DATA.read_text(encoding="utf-8")
