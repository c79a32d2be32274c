"""SGLang facts as data, per supported release (0.5.10 for 0.5.10–0.5.13; 0.5.23 for 0.5.20–0.5.23).

Public API:

- :mod:`.versions`: ``SGLangVersion``, ``SUPPORTED``, ``parse_version``, ``parse_image_tag``,
  ``nearest_supported``, ``dialect(v) -> Dialect`` (probe/info endpoints, entry point, spec-v2 meaning,
  flag renames), ``SGLangVersionError``.
- :mod:`.flags`: ``load_table(v) -> FlagTable`` (``get``, ``match`` with argparse abbreviation semantics).
- :mod:`.args`: ``resolve_server_args(argv, version, env) -> ResolvedArgs``; ``SGLangArgError``.
- :mod:`.metrics`: ``load_metrics(v)``, the release's Prometheus metric families.
- ``data/flags-<v>.json``, ``data/metrics-<v>.json``: written by ``scripts/extract_sglang.py``.
"""
