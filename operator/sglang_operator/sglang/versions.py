"""SGLang releases the operator supports, image-tag parsing, and each release's dialect.

Every PyPI release from 0.4.6 to 0.5.23 is known (:mod:`.catalog`, data read from each wheel); a newer
release is served with the newest data and a warning, an older one is refused (:func:`resolve`). The three
parser eras (``/work/shared/sglang/README.md`` §0): one ``@dataclass ServerArgs`` with hand-written
``add_argument`` calls (0.4.6–0.5.13), the same dataclass with ``A[T, Arg(...)]`` fields and deprecated aliases
(0.5.14–0.5.19), ``msgspec`` ``ServerArgs`` from ``sglang/srt/arg_groups/fields/*.py`` (0.5.20 on).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache

from sglang_operator.sglang import catalog, history
from sglang_operator.sglang._version import SGLangVersion, SGLangVersionError, parse_image_tag, parse_version

__all__ = [
    "ROUTER_IMAGE",
    "ROUTER_IMAGE_REPOSITORY",
    "ROUTER_PACKAGE",
    "ROUTER_VERSION",
    "SUPPORTED",
    "Dialect",
    "SGLangVersion",
    "SGLangVersionError",
    "SpecV2",
    "dialect",
    "nearest_supported",
    "parse_image_tag",
    "parse_version",
    "renamed_flags",
    "resolve",
]

V0_5_10 = SGLangVersion(0, 5, 10)
V0_5_23 = SGLangVersion(0, 5, 23)
SUPPORTED: tuple[SGLangVersion, ...] = tuple(r.version for r in catalog.releases())
"""Every release with extracted data (``data/releases.json``), oldest first."""

resolve = catalog.resolve

# SGLang's router, the Shepherd Model Gateway (successor of ``sglang-router`` 0.3.2 on PyPI), pinned at one release
# (facts and the reasons for this version: docs/design/router-facts.md). ``smg==ROUTER_VERSION`` is in
# the dev extra (the e2e's real binary); ``data/router-flags.json`` is its flag table (scripts/extract_router.py).
ROUTER_PACKAGE = "smg"
ROUTER_VERSION = "1.13.0"
ROUTER_IMAGE_REPOSITORY = "lightseekorg/smg"
"""The image the smg project publishes for each release (its ``.github/workflows/release-docker.yml``: tag = the
``bindings/python/pyproject.toml`` version, no ``v``; entry point ``python3 -m smg.launch_router``, user 65532)."""
ROUTER_IMAGE = f"{ROUTER_IMAGE_REPOSITORY}:{ROUTER_VERSION}"


def nearest_supported(version: SGLangVersion) -> SGLangVersion:
    """The known release whose data stands for ``version`` (itself, the newest for newer releases, ...).

    Raises :class:`SGLangVersionError` for releases older than the oldest known one or never on PyPI.
    """
    return catalog.resolve(version).release.version


class SpecV2(StrEnum):
    """What ``SGLANG_ENABLE_SPEC_V2`` means in a release (``sglang/srt/environ.py``; README §1b)."""

    ABSENT = "absent"  # ≤ 0.5.4: no V2 worker; speculative decoding always disables the overlap scheduler
    OPT_IN = "opt-in"  # 0.5.4.post1–0.5.10: EnvBool(False); "1" enables the overlap (V2) spec workers
    DEFAULT_ON = "default-on"  # 0.5.11–0.5.13: EnvBool(True); "0" disables it
    REMOVED_WARNS = "removed-warns"  # 0.5.14–0.5.20: removed, setting it logs a warning
    IGNORED = "ignored"  # 0.5.21 on: not referenced

    @classmethod
    def from_declaration(cls, decl: str | None) -> SpecV2:
        """From :attr:`catalog.Release.spec_v2_env` (the wheel's ``environ.py`` declaration; ``None``: ABSENT)."""
        if decl is None:
            return cls.ABSENT
        if decl == "removed-warns":
            return cls.REMOVED_WARNS
        return cls.DEFAULT_ON if "True" in decl else cls.OPT_IN


@dataclass(frozen=True)
class Dialect:
    """How to start and talk to one SGLang release; every fact comes from the release's wheel.

    Sources: ``sglang/srt/entrypoints/http_server.py`` (routes), ``sglang/launch_server.py`` (the UserWarning
    recommending ``sglang serve``, 0.5.10 on), the wheel's console scripts and ``sglang/cli/main.py``
    (``sglang serve``, 0.5.5 on), ``sglang/srt/environ.py`` (``SGLANG_ENABLE_SPEC_V2``), the flag tables
    (renames, :mod:`.history`). ``version`` is the release asked for; ``release`` the known release whose data
    applies (they differ for a release newer than the newest known one: ``warning`` then says so).
    """

    version: SGLangVersion
    release: SGLangVersion
    table: SGLangVersion  # the flag table used for parsing (first release with the same flags)
    readiness_path: str  # "/ready" (0.5.20+) else "/health_generate"
    liveness_path: str  # "/health"
    server_info_path: str  # "/server_info" (0.5.6+; "/get_server_info" before, deprecated after)
    model_info_path: str  # "/model_info" (0.5.6+; "/get_model_info" before)
    has_ready: bool
    entry_point: tuple[str, ...]  # the command the release recommends
    legacy_entry_point: tuple[str, ...]  # python3 -m sglang.launch_server (every release)
    serve_cli: bool  # `sglang serve` exists (0.5.5+)
    spec_v2: SpecV2
    prog: str | None = None  # argparse prog set by prepare_server_args (None: derived from sys.argv[0])
    routes: frozenset[str] = field(default_factory=frozenset)
    warning: str | None = None  # set when ``release`` only stands in for ``version``

    @property
    def renamed_flags(self) -> dict[str, tuple[str, ...]]:
        """Flag the release lacks or deprecates → its successor(s) there (computed on first use, from the tables
        of every release: :func:`renamed_flags`)."""
        return renamed_flags(self.release)

    @property
    def spec_v2_default(self) -> bool:
        """Whether the V2 (overlap) speculative worker is on with the env var unset."""
        return self.spec_v2 not in (SpecV2.OPT_IN, SpecV2.ABSENT)

    def spec_v2_enabled(self, env_value: str | None) -> bool:
        """Whether spec V2 is on given ``SGLANG_ENABLE_SPEC_V2`` (``None`` = unset).

        ``EnvBool.parse`` (``sglang/srt/environ.py``): "true"/"1"/"yes"/"y" → on, "false"/"0"/"no"/"n" →
        off (any case); any other value warns and falls back to the release default. From 0.5.14 the
        V2 worker is always used and the variable has no effect; before 0.5.4.post1 there is no V2 worker.
        """
        if self.spec_v2 in (SpecV2.REMOVED_WARNS, SpecV2.IGNORED):
            return True
        if self.spec_v2 is SpecV2.ABSENT:
            return False
        if env_value is None:
            return self.spec_v2_default
        value = env_value.lower()
        if value in ("true", "1", "yes", "y"):
            return True
        if value in ("false", "0", "no", "n"):
            return False
        return self.spec_v2_default

    def flag_for(self, flag: str) -> tuple[str, ...]:
        """The flag(s) this release uses for ``flag`` (``--mamba-scheduler-strategy`` →
        ``--mamba-radix-cache-strategy`` from 0.5.14, where the old spelling is a deprecated alias or gone)."""
        return self.renamed_flags.get(flag, (flag,))

    def prog_for(self, entry: tuple[str, ...]) -> str:
        """argparse's program name in SGLang's messages when started with ``entry`` (``sglang serve: error: ...``).

        Without ``prog=`` argparse uses ``basename(sys.argv[0])``: ``launch_server.py`` for
        ``python -m sglang.launch_server``, ``sglang`` for the console script."""
        if self.prog:
            return self.prog
        return "sglang" if entry[:1] == ("sglang",) else "launch_server.py"


@cache
def renamed_flags(release: SGLangVersion) -> dict[str, tuple[str, ...]]:
    """Old option → successor(s) that parse in ``release``, for every renamed option ``release`` no longer
    declares or declares only as a deprecated alias (from :func:`history.renames`)."""
    out: dict[str, tuple[str, ...]] = {}
    for h in history.renames():
        gone = not h.parses_in(release)
        deprecated = h.deprecated_in is not None and h.deprecated_in <= release and h.parses_in(release)
        if (gone and release > h.last) or deprecated:
            succ = history.successors_in(h.option, release)
            if succ:
                out[h.option] = succ
    return out


def _spec_v2(rel: catalog.Release) -> SpecV2:
    """The release's :class:`SpecV2`; no declaration means ABSENT before the variable existed, IGNORED after."""
    if rel.spec_v2_env is None and any(r.spec_v2_env for r in catalog.releases() if r.version < rel.version):
        return SpecV2.IGNORED
    return SpecV2.from_declaration(rel.spec_v2_env)


def dialect(version: SGLangVersion) -> Dialect:
    """The :class:`Dialect` of ``version`` (see :func:`resolve`); raises :class:`SGLangVersionError` when the
    release is not supported."""
    res = catalog.resolve(version)
    rel = res.release
    has_ready = "/ready" in rel.routes
    legacy = ("python3", "-m", "sglang.launch_server")
    return Dialect(
        version=version,
        release=rel.version,
        table=rel.flags_table,
        readiness_path="/ready" if has_ready else "/health_generate",
        liveness_path="/health",
        server_info_path="/server_info" if "/server_info" in rel.routes else "/get_server_info",
        model_info_path="/model_info" if "/model_info" in rel.routes else "/get_model_info",
        has_ready=has_ready,
        entry_point=("sglang", "serve") if rel.recommends_serve else legacy,
        legacy_entry_point=legacy,
        serve_cli=rel.serve_cli,
        spec_v2=_spec_v2(rel),
        prog=rel.prog,
        routes=rel.routes,
        warning=res.warning,
    )
