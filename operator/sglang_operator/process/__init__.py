"""Process-wide services: leader election (:mod:`.leader`), ``/readyz`` (:mod:`.readiness`) and the operator's own
``/metrics`` (:mod:`.telemetry`). No kopf."""
