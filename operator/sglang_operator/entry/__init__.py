"""Entry points, the top layer.

- :mod:`.cli`: the ``sglang-operator`` command (``run``, ``crd``, ``render``, ``import``, ``prometheus-config``, …).
- :mod:`.runner`: the operator process: ``kopf.run`` with its settings, the Lease, the metrics port."""
