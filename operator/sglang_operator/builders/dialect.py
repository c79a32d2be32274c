"""The SGLang facts the builders use, read from the SGLang data layer (:mod:`sglang_operator.sglang`).

This module is the builders' only door to that layer: version resolution (``sglang.versions``), a release's
dialect (flag spellings, entry point, probe endpoint, meaning of ``SGLANG_ENABLE_SPEC_V2``), flag-table
lookups (``sglang.flags``), guidance for refused flags (``sglang.guidance``) and the SGLang-compatible argument
resolution (``sglang.args``). No flag table is kept here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglang_operator.api.blocks import SGLangImage
from sglang_operator.sglang import flags as _flags
from sglang_operator.sglang import guidance as _guidance
from sglang_operator.sglang import release as _release
from sglang_operator.sglang import versions as _versions

SGLangVersion = _versions.SGLangVersion


class VersionError(ValueError):
    """The SGLang release of a spec is unknown or unsupported (reported as SpecValid=False)."""


def resolve_version(sglang: SGLangImage) -> SGLangVersion:
    """The SGLang release a spec targets: ``spec.sglang.version`` or, when absent, parsed from the image tag.

    Any release from the oldest known one (0.4.6) on is accepted; one newer than the newest known release is
    rendered with the newest flag table and a warning (:func:`dialect`, ``Dialect.warning``). Raises
    :class:`VersionError` (message naming ``spec.sglang``) for no version, an older release or a version PyPI
    never had.
    """
    where = "spec.sglang.version" if sglang.version else "spec.sglang.image"
    try:
        version = _versions.parse_version(sglang.version) if sglang.version else _versions.parse_image_tag(sglang.image)
        _versions.resolve(version)
    except _versions.SGLangVersionError as err:
        text = str(err).replace("set the SGLang version explicitly", "set spec.sglang.version to the release the "
                                                                     "image runs")
        raise VersionError(f"{where}: {text}") from None
    if sglang.version:
        try:
            tagged = _versions.parse_image_tag(sglang.image)
        except _versions.SGLangVersionError:
            return version  # a tag without a version (``latest``, a digest): trust spec.sglang.version
        if tagged != version:
            raise VersionError(
                f"spec.sglang.version: {version} contradicts the image tag of {sglang.image} ({tagged}); "
                "the command line would be rendered for the wrong release"
            )
    return version


@dataclass(frozen=True)
class Dialect:
    """What rendering needs to know about one release (a view of :class:`sglang.versions.Dialect`).

    ``spec_v2_env``: whether the release reads ``SGLANG_ENABLE_SPEC_V2`` (0.5.4.post1–0.5.13);
    ``spec_v2_default``: its value when unset; ``spec_v2_worker``: whether the release has the V2 (overlap)
    speculative worker at all (0.5.4.post1 on). ``table``: the flag table standing for the release;
    ``release``: the known release whose data applies; ``warning``: set when that is only a stand-in (a release
    newer than the newest known one).
    """

    version: SGLangVersion
    table: SGLangVersion
    entry_point: tuple[str, ...]
    readiness_path: str
    liveness_path: str
    spec_v2_env: bool
    spec_v2_default: bool
    renamed: dict[str, tuple[str, ...]]
    release: SGLangVersion | None = None
    spec_v2_worker: bool = True
    warning: str | None = None

    def flag(self, name: str) -> str:
        """The release's spelling of launch flag ``name`` (``--mamba-scheduler-strategy`` →
        ``--mamba-radix-cache-strategy`` from 0.5.14, where the old spelling is deprecated, then gone)."""
        return self.renamed.get(name, (name,))[0]


def dialect(version: SGLangVersion) -> Dialect:
    """The :class:`Dialect` of ``version``; raises :class:`VersionError` when unsupported."""
    try:
        d = _versions.dialect(version)
    except _versions.SGLangVersionError as err:
        raise VersionError(f"spec.sglang: {err}") from None
    return Dialect(
        version=version,
        table=d.table,
        entry_point=tuple(d.entry_point),
        readiness_path=d.readiness_path,
        liveness_path=d.liveness_path,
        spec_v2_env=d.spec_v2 in (_versions.SpecV2.OPT_IN, _versions.SpecV2.DEFAULT_ON),
        spec_v2_default=d.spec_v2_default,
        renamed=dict(d.renamed_flags),
        release=d.release,
        spec_v2_worker=d.spec_v2 is not _versions.SpecV2.ABSENT,
        warning=d.warning,
    )


@dataclass(frozen=True)
class FlagInfo:
    """One launch option of a release: every spelling, dest, choices and whether it takes a value."""

    options: tuple[str, ...]
    dest: str
    choices: tuple[str, ...] | None
    takes_value: bool


def _flag_info(f: Any) -> FlagInfo | None:
    if f is None:
        return None
    choices = tuple(str(c) for c in f.choices) if f.choices else None
    return FlagInfo(tuple(f.options), f.dest, choices, f.takes_value)


def lookup_flag(version: SGLangVersion, name: str) -> FlagInfo | None:
    """The option spelled exactly ``name`` in ``version``'s flag table (no abbreviation), or None."""
    return _flag_info(_flags.load_table(version).get(name))


@dataclass(frozen=True)
class FlagAdvice:
    """Guidance for one flag as written (a view of :class:`sglang.guidance.Advice`): ``kind`` (``ok``,
    ``deprecated``, ``refused``, ``renamed``, ``not-yet``, ``removed``, ``abbreviation``, ``ambiguous``,
    ``unknown``), the flags to write instead, SGLang's own message when it refuses it, and one sentence."""

    kind: str
    suggestions: tuple[str, ...]
    sglang_says: str | None
    text: str
    parses: bool
    available: str | None = None  # the releases that declare the flag ("0.5.7 to 0.5.19", "0.4.6 on")


def flag_advice(version: SGLangVersion, flag: str, value: str | None = None,
                owned: dict[str, str] | None = None) -> FlagAdvice:
    """What to tell a user who wrote ``flag`` (and ``value``) for ``version``: successors of a renamed flag and the
    release that dropped it, the closest real flags of that release, SGLang's wording
    (:func:`sglang_operator.sglang.guidance.advise`). ``owned``: flag → the typed spec field that renders it."""
    a = _guidance.advise(version, flag, value, owned)
    return FlagAdvice(a.kind.value, a.suggestions, a.sglang_says, a.text, a.parses, a.available)


class SGLangArgError(ValueError):
    """SGLang would refuse the command line; the message is SGLang's own, ``kind`` its exception class
    (``ValueError``, ``AssertionError``, ``TypeError``) or ``argparse`` (exit status 2)."""

    def __init__(self, message: str, kind: str = "argparse") -> None:
        super().__init__(message)
        self.kind = kind


def resolve_args(version: SGLangVersion | _release.Release, argv: list[str], env: dict[str, str]
                 ) -> tuple[dict[str, Any], list[str]]:
    """Parse and resolve ``argv`` (flags only, no entry point) as ``version``'s ``launch_server`` would
    (:func:`sglang_operator.sglang.args.resolve_server_args`).

    Returns (resolved server args keyed by SGLang's dest names, SGLang's warnings); raises
    :class:`SGLangArgError`.
    """
    from sglang_operator.sglang import args as _args

    try:
        resolved = _args.resolve_server_args(argv, version, env)
    except _args.SGLangArgError as err:
        raise SGLangArgError(str(err), err.kind) from None
    return dict(resolved.values), list(resolved.warnings)


def model_architecture(model_path: str) -> tuple[str | None, bool]:
    """(``architectures[0]`` of a known model path or None, whether SGLang finds MTP layers in it for
    NEXTN / EAGLE without a draft model: ``sglang.models.draft_architecture_for``)."""
    from sglang_operator.sglang import models as _models

    arch = _models.architecture_for(model_path)
    return arch, _models.draft_architecture_for(arch) is not None


@dataclass(frozen=True, eq=False)
class Release:
    """The image's SGLang release as a render uses it, resolved once (:func:`resolve_release`) and handed to the
    command builder, the validation and the argument resolution: ``version``, the render's :class:`Dialect`, and the
    release's facts (:class:`sglang_operator.sglang.release.Release`: flag table, rule era, metric names)."""

    version: SGLangVersion
    dialect: Dialect
    facts: _release.Release

    def flag(self, name: str) -> FlagInfo | None:
        """The option spelled exactly ``name`` in the release's flag table (no abbreviation), or None."""
        return _flag_info(self.facts.flags.get(name))

    def advice(self, flag: str, value: str | None = None, owned: dict[str, str] | None = None) -> FlagAdvice:
        """:func:`flag_advice` for this release."""
        return flag_advice(self.version, flag, value, owned)

    def resolve_args(self, argv: list[str], env: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
        """:func:`resolve_args` for this release, with its facts already resolved. Raises :class:`SGLangArgError`."""
        return resolve_args(self.facts, argv, env)


def resolve_release(sglang: SGLangImage) -> Release:
    """The release of ``spec.sglang`` (:func:`resolve_version`) with its dialect and facts, once. Raises
    :class:`VersionError`."""
    version = resolve_version(sglang)
    d = dialect(version)
    try:
        facts = _release.release(version)
    except _versions.SGLangVersionError as err:
        raise VersionError(f"spec.sglang: {err}") from None
    return Release(version, d, facts)
