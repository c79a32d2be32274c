"""Per-revision samples, pure: typed samples (:mod:`.model`), the metric names of each release (:mod:`.roles`), the
/metrics text parser (:mod:`.parse`) and the computation of a sample from two scrapes (:mod:`.compute`). The I/O
that scrapes pods is :mod:`sglang_operator.io.sampler`."""
