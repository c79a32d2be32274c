"""SGLang releases the operator supports, image-tag parsing, and each release's dialect.

Two flag tables ship with the package (``data/flags-<v>.json``): **0.5.10**, which stands for the
0.5.10–0.5.13 era (one ``@dataclass ServerArgs`` in ``sglang/srt/server_args.py``; the
``--mamba-scheduler-strategy`` and single ``--cuda-graph-max-bs`` flags; ``SGLANG_ENABLE_SPEC_V2`` in
force), and **0.5.23**, which stands for 0.5.20–0.5.23 (``msgspec`` ``ServerArgs`` built from
``sglang/srt/arg_groups/fields/*.py``; renamed flags; ``/ready``). 0.5.14–0.5.19 (the alias era) and
anything older than 0.5.10 or newer than 0.5.23 are unsupported: :func:`nearest_supported` raises
:class:`SGLangVersionError` for them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "RENAMES",
    "SUPPORTED",
    "Dialect",
    "SGLangVersion",
    "SGLangVersionError",
    "SpecV2",
    "dialect",
    "nearest_supported",
    "parse_image_tag",
    "parse_version",
]


class SGLangVersionError(ValueError):
    """A version string or image tag that cannot be parsed, or a release the operator does not support."""


@dataclass(frozen=True, order=True)
class SGLangVersion:
    """An SGLang release number, e.g. ``0.5.10`` or ``0.5.10.post1`` (compares numerically)."""

    major: int
    minor: int
    patch: int
    post: int = 0

    def __str__(self) -> str:
        base = f"{self.major}.{self.minor}.{self.patch}"
        return f"{base}.post{self.post}" if self.post else base


_VERSION_RE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?")


def parse_version(text: str) -> SGLangVersion:
    """``"0.5.10"``, ``"v0.5.10"``, ``"0.5.10.post1"`` → :class:`SGLangVersion`.

    Raises :class:`SGLangVersionError` for anything else.
    """
    m = _VERSION_RE.fullmatch(text.strip())
    if not m:
        raise SGLangVersionError(f"not an SGLang version: {text!r}")
    return SGLangVersion(int(m[1]), int(m[2]), int(m[3]), int(m[4] or 0))


def parse_image_tag(image: str) -> SGLangVersion:
    """The SGLang version in an image reference, e.g. ``lmsysorg/sglang:v0.5.10-cu129`` → 0.5.10.

    Accepts ``v0.5.10``, ``v0.5.10.post1-cu129``, ``0.5.23-cu130-runtime`` and a ``@sha256:`` suffix.
    Raises :class:`SGLangVersionError` when the tag holds no version (``latest``, ``dev``, no tag):
    the spec must then name ``sglang.version`` explicitly.
    """
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if ":" not in last:
        raise SGLangVersionError(f"image {image!r} has no tag; set the SGLang version explicitly")
    tag = last.split(":", 1)[1]
    m = re.match(r"v?(\d+\.\d+\.\d+(?:\.post\d+)?)(?:$|[-_+])", tag)
    if not m:
        raise SGLangVersionError(f"image tag {tag!r} holds no SGLang version; set the SGLang version explicitly")
    return parse_version(m[1])


V0_5_10 = SGLangVersion(0, 5, 10)
V0_5_23 = SGLangVersion(0, 5, 23)
SUPPORTED: tuple[SGLangVersion, ...] = (V0_5_10, V0_5_23)
"""Versions with a committed flag/metric table (``data/flags-<v>.json``)."""

# (first, last, table) — inclusive ranges of releases that share a table.
_ERAS: tuple[tuple[SGLangVersion, SGLangVersion, SGLangVersion], ...] = (
    (SGLangVersion(0, 5, 10), SGLangVersion(0, 5, 13, 99), V0_5_10),
    (SGLangVersion(0, 5, 20), SGLangVersion(0, 5, 23, 99), V0_5_23),
)


def nearest_supported(version: SGLangVersion) -> SGLangVersion:
    """The supported table that stands for ``version`` (0.5.11–0.5.13 → 0.5.10; 0.5.20–0.5.22 → 0.5.23).

    Raises :class:`SGLangVersionError` naming the supported ranges for any other release.
    """
    for first, last, table in _ERAS:
        if first <= version <= last:
            return table
    raise SGLangVersionError(
        f"SGLang {version} is not supported; supported releases: 0.5.10-0.5.13 (table 0.5.10) "
        "and 0.5.20-0.5.23 (table 0.5.23)"
    )


class SpecV2(StrEnum):
    """What ``SGLANG_ENABLE_SPEC_V2`` means in a release (``sglang/srt/environ.py``; README §1b)."""

    OPT_IN = "opt-in"  # ≤ 0.5.10: EnvBool(False); "1" enables the overlap (V2) spec workers
    DEFAULT_ON = "default-on"  # 0.5.11–0.5.13: EnvBool(True); "0" disables it
    REMOVED_WARNS = "removed-warns"  # 0.5.14–0.5.20: removed, setting it logs a warning
    IGNORED = "ignored"  # ≥ 0.5.22: not referenced


RENAMES: dict[str, tuple[str, ...]] = {
    "--mamba-scheduler-strategy": ("--mamba-radix-cache-strategy",),
    "--cuda-graph-max-bs": ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"),
    "--cuda-graph-bs": ("--cuda-graph-bs-decode", "--cuda-graph-bs-prefill"),
}
"""Flags of the 0.5.10 era replaced in 0.5.20+ (aliases existed 0.5.14–0.5.19, removed in 0.5.20).

Old flag → its replacement(s); a split flag maps to (decode, prefill). Checked against both flag tables
by ``tests/sglang/test_versions.py``.
"""


@dataclass(frozen=True)
class Dialect:
    """How to talk to one SGLang release.

    Sources: ``sglang/srt/entrypoints/http_server.py`` (routes), ``sglang/launch_server.py`` (the
    UserWarning recommending ``sglang serve``, present in 0.5.10 and 0.5.23), ``sglang/cli/main.py``.
    """

    version: SGLangVersion
    table: SGLangVersion  # the flag table used for parsing
    readiness_path: str  # "/ready" (0.5.20+) else "/health_generate"
    liveness_path: str  # "/health"
    server_info_path: str  # "/server_info" ("/get_server_info" is the deprecated spelling, logs a warning)
    model_info_path: str  # "/model_info" ("/get_model_info" deprecated)
    has_ready: bool
    entry_point: tuple[str, ...]  # recommended command
    legacy_entry_point: tuple[str, ...]  # still accepted, prints a UserWarning
    spec_v2: SpecV2
    renamed_flags: dict[str, tuple[str, ...]]  # old flag → replacement(s) for flags this release lacks

    @property
    def spec_v2_default(self) -> bool:
        """Whether the V2 (overlap) speculative worker is on with the env var unset."""
        return self.spec_v2 is not SpecV2.OPT_IN

    def spec_v2_enabled(self, env_value: str | None) -> bool:
        """Whether spec V2 is on given ``SGLANG_ENABLE_SPEC_V2`` (``None`` = unset).

        ``EnvBool.parse`` (``sglang/srt/environ.py``): "true"/"1"/"yes"/"y" → on, "false"/"0"/"no"/"n" →
        off (any case); any other value warns and falls back to the release default. From 0.5.14 the
        V2 worker is always used and the variable has no effect.
        """
        if self.spec_v2 in (SpecV2.REMOVED_WARNS, SpecV2.IGNORED):
            return True
        if env_value is None:
            return self.spec_v2_default
        value = env_value.lower()
        if value in ("true", "1", "yes", "y"):
            return True
        if value in ("false", "0", "no", "n"):
            return False
        return self.spec_v2_default

    def flag_for(self, flag: str) -> tuple[str, ...]:
        """The flag(s) this release uses for ``flag`` (a 0.5.10-era name is mapped to its 0.5.20+ names)."""
        return self.renamed_flags.get(flag, (flag,))


def dialect(version: SGLangVersion) -> Dialect:
    """The :class:`Dialect` of a supported release; raises :class:`SGLangVersionError` otherwise."""
    table = nearest_supported(version)
    has_ready = version >= SGLangVersion(0, 5, 20)
    if version < SGLangVersion(0, 5, 11):
        spec_v2 = SpecV2.OPT_IN
    elif version < SGLangVersion(0, 5, 14):
        spec_v2 = SpecV2.DEFAULT_ON
    elif version < SGLangVersion(0, 5, 22):
        spec_v2 = SpecV2.REMOVED_WARNS
    else:
        spec_v2 = SpecV2.IGNORED
    return Dialect(
        version=version,
        table=table,
        readiness_path="/ready" if has_ready else "/health_generate",
        liveness_path="/health",
        server_info_path="/server_info",
        model_info_path="/model_info",
        has_ready=has_ready,
        entry_point=("sglang", "serve"),
        legacy_entry_point=("python3", "-m", "sglang.launch_server"),
        spec_v2=spec_v2,
        renamed_flags=dict(RENAMES) if table >= V0_5_23 else {},
    )
