"""The SGLang releases this operator knows (every PyPI release 0.4.6 … 0.5.23), read from ``data/releases.json``.

Each :class:`Release` is what ``scripts/extract_sglang.py`` read from that release's own wheel (its sha256 is in
the header): the flag records of its ``launch_server`` parser, its metric families and its dialect facts.
:func:`resolve` maps any version to the release whose data applies and says when that is a guess:

- a known release → itself;
- newer than the newest release → the newest, with a warning ("… unverified"); never refused for that alone;
- a post-release newer than the known ones of its base (``0.5.3.post9``) → the newest known post, with a warning;
- older than the oldest release, or a version between releases that PyPI never had (``0.5.0``) →
  :class:`SGLangVersionError` naming what is supported.

The data is loaded once per process (~50 ms); records are decoded per release on first use.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from sglang_operator.sglang import _store
from sglang_operator.sglang._version import SGLangVersion, SGLangVersionError, parse_version

__all__ = ["Release", "Resolution", "flag_records", "get", "metric_records", "newest", "oldest", "releases",
           "resolve"]


@dataclass(frozen=True)
class Release:
    """One PyPI release of SGLang as extracted from its wheel.

    ``flags_table`` / ``metrics_table``: the first release with exactly the same flag (metric) list — the
    release whose parser this one shares (post-releases mostly share their base's). ``prog``: the argparse prog
    ``prepare_server_args`` sets (``"sglang serve"`` from 0.5.10), ``None`` when argparse derives it from
    ``sys.argv[0]``. ``routes``: the probe/read-back routes ``sglang/srt/entrypoints/http_server.py`` serves.
    ``serve_cli``: ``sglang serve`` exists; ``recommends_serve``: ``sglang/launch_server.py`` recommends it.
    ``spec_v2_env``: ``SGLANG_ENABLE_SPEC_V2``'s declaration in ``sglang/srt/environ.py`` (see
    ``extract/dialect.py``).
    """

    version: SGLangVersion
    wheel: str
    wheel_sha256: str
    prog: str | None
    flags_source: str
    metrics_source: str
    flags_table: SGLangVersion
    metrics_table: SGLangVersion
    routes: frozenset[str]
    serve_cli: bool
    recommends_serve: bool
    spec_v2_env: str | None


@dataclass(frozen=True)
class Resolution:
    """The release whose data applies to ``version`` and, when that is not ``version`` itself, why (``warning``)."""

    version: SGLangVersion
    release: Release
    warning: str | None = None


@cache
def _raw() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    data = resources.files("sglang_operator.sglang") / "data"
    docs = tuple(json.loads((data / name).read_text(encoding="utf-8")) for name in _store.FILES)
    return docs[0], docs[1], docs[2]


@cache
def _releases() -> tuple[Release, ...]:
    rel, _, _ = _raw()
    flags_of, metrics_of = _store.table_of(rel, "flags"), _store.table_of(rel, "metrics")
    out = []
    for e in rel["releases"]:
        d = e["dialect"]
        out.append(Release(
            version=parse_version(e["version"]), wheel=e["wheel"], wheel_sha256=e["wheel_sha256"], prog=e["prog"],
            flags_source=e["flags_source"], metrics_source=e["metrics_source"],
            flags_table=parse_version(flags_of[e["version"]]), metrics_table=parse_version(metrics_of[e["version"]]),
            routes=frozenset(d["routes"]), serve_cli=d["serve_cli"], recommends_serve=d["recommends_serve"],
            spec_v2_env=d["spec_v2_env"],
        ))
    return tuple(sorted(out, key=lambda r: r.version))


def releases() -> tuple[Release, ...]:
    """Every known release, oldest first."""
    return _releases()


@cache
def _by_version() -> dict[SGLangVersion, Release]:
    return {r.version: r for r in _releases()}


def oldest() -> Release:
    return _releases()[0]


def newest() -> Release:
    return _releases()[-1]


def get(version: SGLangVersion) -> Release | None:
    """The known release ``version`` exactly, or ``None``."""
    return _by_version().get(version)


def resolve(version: SGLangVersion) -> Resolution:
    """The release whose data stands for ``version`` (see the module docstring).

    Raises :class:`SGLangVersionError` for a version older than the oldest known release or one PyPI never had.
    """
    exact = get(version)
    if exact is not None:
        return Resolution(version, exact)
    first, last = oldest(), newest()
    if version > last.version:
        return Resolution(version, last, (
            f"SGLang {version} is newer than {last.version}, the newest release this operator knows: "
            f"flags checked against {last.version}, unverified"))
    if version < first.version:
        raise SGLangVersionError(
            f"SGLang {version} is older than {first.version}, the oldest release this operator supports "
            f"(supported: {first.version} to {last.version} and newer)")
    posts = [r for r in _releases() if r.version.base == version.base]
    if posts and version > posts[-1].version:
        known = posts[-1].version
        return Resolution(version, posts[-1], (
            f"SGLang {version} is not a release this operator knows (the newest {version.base} release it "
            f"knows is {known}): flags checked against {known}, unverified"))
    before = max((r.version for r in _releases() if r.version < version), default=None)
    after = min((r.version for r in _releases() if r.version > version), default=None)
    raise SGLangVersionError(
        f"SGLang {version} is not a release on PyPI (known releases around it: {before} and {after}); "
        f"supported: every release from {first.version} to {last.version}")


@cache
def _doc(release: SGLangVersion) -> dict[str, Any]:
    if get(release) is None:
        raise KeyError(f"SGLang {release} is not a known release")
    rel, flags, metrics = _raw()
    return _store.decode_one(rel, flags, metrics, str(release))


def flag_records(release: SGLangVersion) -> list[dict[str, Any]]:
    """The flag records of known release ``release`` (argparse registration order); ``KeyError`` if unknown."""
    return list(_doc(release)["flags"])


def metric_records(release: SGLangVersion) -> list[dict[str, Any]]:
    """The metric records of known release ``release`` (sorted by name); ``KeyError`` if unknown."""
    return list(_doc(release)["metrics"])


def release_doc(release: SGLangVersion) -> dict[str, Any]:
    """The whole decoded document of a release (what ``extract.build_release`` gives for its wheel)."""
    return dict(_doc(release))
