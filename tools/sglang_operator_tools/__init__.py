"""Build-time tools of sglang-operator, not shipped in the operator's wheel: the SGLang wheel extractor
(:mod:`.extract`, ``scripts/extract_sglang.py``) and the generators of the alert rules and the Grafana dashboard
(:mod:`.monitoring`, ``python -m sglang_operator_tools.monitoring.generate``)."""
