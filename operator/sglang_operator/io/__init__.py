"""I/O: the Kubernetes API (:mod:`.kube`, :mod:`.revisions`), SGLang's HTTP endpoints (:mod:`.sglang_http`,
:mod:`.loadgen`), the sampler that scrapes and probes pods (:mod:`.sampler`), the pod cache (:mod:`.pods`) and
the PodMonitor API discovery (:mod:`.discovery`)."""
