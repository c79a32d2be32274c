"""sglang-sim: an SGLang simulator (HTTP API, metrics, logs, performance model) for tests and demos."""
