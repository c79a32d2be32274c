"""I/O: the Kubernetes API, SGLang's HTTP endpoints, the sampler and the trial bench.

- :mod:`._client`: the operator's process-wide Kubernetes client, private to :mod:`.kube`, :mod:`.kube_write` and
  :mod:`.revisions` (an import-linter contract; ``tests/repo/test_client_writes.py`` finds a write with it elsewhere).
- :mod:`.api`: the Kubernetes API as one protocol (``KubeAPI``); an implementation is handed in with ``using``/``bind``
  (the offline tests' fake), else the calls go to the cluster; the fence is checked in its wrapper of every write.
- :mod:`.crd_presence`: whether a CustomResourceDefinition's API is served, read again after a while.
- :mod:`.discovery`: whether the operator applies a PodMonitor per server (is the API served).
- :mod:`.fence`: fencing: every write first asks whether this process may still write (the Lease), in the dispatch
  wrapper of :mod:`.api`, so the fake passes it too.
- :mod:`.keda`: whether KEDA's ScaledObject API exists, and the default Prometheus address.
- :mod:`.kube`: Kubernetes reads.
- :mod:`.kube_write`: Kubernetes writes (only the apply path, the ledger and the status writers import it).
- :mod:`.loadgen`: the load generator and probe client for SGLang's OpenAI-compatible API.
- :mod:`.owners`: the objects between a labelled pod and its owner, read once and kept.
- :mod:`.parse_pool`: the parse of the sampler's scraped lines in worker processes, off the event loop.
- :mod:`.pods`: the managed pods from a kopf watch, and the sampler's view of them.
- :mod:`.reviews`: TokenReview and SubjectAccessReview for the authenticated ``/metrics``.
- :mod:`.revisions`: the revision ledger's ControllerRevisions in the API.
- :mod:`.sampler`: the sampler: scrape and probe a server's pods, one sample per revision.
- :mod:`.scrape_metrics`: the sampler's own counters of its reads of SGLang pods.
- :mod:`.sglang_http`: the HTTP clients for running SGLang servers.
- :mod:`.trialbench`: the measurement of one tuning trial at each concurrency level.
- :mod:`.trialstreams`: the process-wide cap on the streamed requests of trials in flight."""
