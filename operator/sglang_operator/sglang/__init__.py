"""SGLang facts as data, for every PyPI release from 0.4.6 to 0.5.23 (newer releases: the newest, unverified).

Modules:

- :mod:`.versions`: ``SGLangVersion``, ``SUPPORTED`` (every known release), ``parse_version``,
  ``parse_image_tag``, ``resolve`` / ``nearest_supported`` (the release whose data applies, with a warning for
  a newer release), ``dialect(v) -> Dialect`` (entry point, probe/info endpoints, argparse prog, spec-v2 meaning,
  flag renames, all read from the release's wheel), ``SGLangVersionError``.
- :mod:`.catalog`: the known releases (``data/releases.json``: wheel, sha256, dialect facts) and their records.
- :mod:`.flags`: ``load_table(v) -> FlagTable`` (``get``, ``match`` with argparse abbreviation semantics);
  ``load_router_table()``: the pinned router's (``smg``, :data:`.versions.ROUTER_VERSION`) flags, the same type.
- :mod:`.history`: every flag's releases, deprecations, removals and successors, derived from the tables.
- :mod:`.guidance`: ``advise(v, flag)`` — successors, closest flags and SGLang's wording for a refused flag.
- :mod:`.args`: ``resolve_server_args(argv, version, env) -> ResolvedArgs``; ``SGLangArgError``; ``warm_up()``.
- :mod:`.rules`: the hand-ported resolution and validation rules (GPU-independent subset), per release.
- :mod:`.rules_spec`: the hand-ported speculative-decoding resolution, per release.
- :mod:`.rules_mamba`: the hand-ported radix-cache resolution of hybrid GDN/Mamba models, per release.
- :mod:`.rule_eras`: which variant of each hand-ported rule a release runs.
- :mod:`.metrics`: ``load_metrics(v)``, the release's Prometheus metric families.
- :mod:`.models`: known model architectures, chosen by model path.
- :mod:`.release`: one release resolved once (:class:`~.release.Release`): what every consumer of SGLang facts needs.
- :mod:`._parser`: an ``argparse`` parser rebuilt from a flag table (used by :mod:`.args`).
- :mod:`._store`: the compact on-disk form of the per-release data.
- :mod:`._version`: release numbers and image tags (no data).
- ``data/{releases,flags,metrics}.json``: written by ``scripts/extract_sglang.py`` (format: ``_store.py``);
  ``data/router-flags.json``: written by ``scripts/extract_router.py`` from the pinned ``smg`` wheel.
"""
