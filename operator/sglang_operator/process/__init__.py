"""Process-wide services. No kopf.

- :mod:`.leader`: leader election on a Lease.
- :mod:`.metrics_http`: the metrics port's HTTP server (``/metrics``, ``/readyz``), optionally authenticated, over TLS.
- :mod:`.metrics_tls`: the metrics port's TLS certificate with ``--metrics-secure``.
- :mod:`.readiness`: the operator's readiness (``/readyz``): has it seen every SGLangServer once.
- :mod:`.telemetry`: the operator's own ``/metrics``."""
