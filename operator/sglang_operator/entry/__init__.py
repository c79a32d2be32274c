"""Entry points: ``sglang-operator`` (:mod:`.cli`) and the operator process (:mod:`.runner`: kopf settings, the Lease,
the metrics port). The top layer."""
