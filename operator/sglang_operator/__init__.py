"""sglang-operator: a Kubernetes operator for SGLang servers with MTP / NEXTN speculative decoding.

Its packages are layers that import only downward (``.importlinter``, docs/architecture.md):

- :mod:`.entry`: the ``sglang-operator`` command and the operator process.
- :mod:`.plugin`: the user's commands (``kubectl sglang …``), with their own client.
- :mod:`.control`: the kopf registrations, the observer and every writer for one SGLangServer or SGLangTuning.
- :mod:`.process`: process-wide services (leader election, ``/readyz``, the operator's own ``/metrics``).
- :mod:`.io`: the Kubernetes API, SGLang's HTTP endpoints, the sampler and the trial bench.
- :mod:`.decisions`: pure decisions: status, conditions, the rollback analysis, the canary, tuning, sampling.
- :mod:`.builders`: pure builders of the Kubernetes objects and of SGLang's command line.
- :mod:`.api`: the CRDs' pydantic models and the CRDs generated from them.
- :mod:`.sglang`: SGLang facts as data, per release."""

__version__ = "0.1.0"
