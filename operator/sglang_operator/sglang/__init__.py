"""SGLang facts as data, for every PyPI release from 0.4.6 to 0.5.23 (newer releases: the newest, unverified).

Public API:

- :mod:`.versions`: ``SGLangVersion``, ``SUPPORTED`` (every known release), ``parse_version``,
  ``parse_image_tag``, ``resolve`` / ``nearest_supported`` (the release whose data applies, with a warning for
  a newer release), ``dialect(v) -> Dialect`` (entry point, probe/info endpoints, argparse prog, spec-v2 meaning,
  flag renames, all read from the release's wheel), ``SGLangVersionError``.
- :mod:`.catalog`: the known releases (``data/releases.json``: wheel, sha256, dialect facts) and their records.
- :mod:`.flags`: ``load_table(v) -> FlagTable`` (``get``, ``match`` with argparse abbreviation semantics).
- :mod:`.history`: every flag's releases, deprecations, removals and successors, derived from the tables.
- :mod:`.guidance`: ``advise(v, flag)`` — successors, closest flags and SGLang's wording for a refused flag.
- :mod:`.args`: ``resolve_server_args(argv, version, env) -> ResolvedArgs``; ``SGLangArgError``; ``warm_up()``.
- :mod:`.rules` (+ ``rules_spec``, ``rules_mamba``, ``rule_eras``): the hand-ported resolution rules and which
  variant each release runs.
- :mod:`.metrics`: ``load_metrics(v)``, the release's Prometheus metric families.
- ``data/{releases,flags,metrics}.json``: written by ``scripts/extract_sglang.py`` (format: ``_store.py``).
"""
