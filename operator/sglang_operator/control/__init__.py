"""Control: the kopf registrations, the status observer and everything that writes for one SGLangServer (apply,
drain, ledger, multi-node late apply) or one SGLangTuning. Imports process, io, decisions, builders, api, sglang;
nothing imports it but the entry points.

- :mod:`.apply`: the one apply path every writer of a server's children goes through.
- :mod:`.autoscaling`: the server's autoscaler as one more step of its tick (glue of
  :mod:`sglang_operator.decisions.autoscaling`).
- :mod:`.children`: applying a server's children (glue shared by the reconcile handler and the observer).
- :mod:`.drain`: the drain before a Recreate replaces a server's pods.
- :mod:`.failures`: what a failed apply of the analysis (a rollback's, a canary's) leaves behind.
- :mod:`.gather`: the I/O of one observation (the observer's gather) and the reads of a server's pods.
- :mod:`.handlers`: the kopf handlers for SGLangServer and the events of its children and managed pods.
- :mod:`.ledger`: the revision ledger as ControllerRevisions.
- :mod:`.memory`: everything the operator keeps in memory about one server, and the map of them.
- :mod:`.multinode`: apply a server that waited for the LeaderWorkerSet API once it is served.
- :mod:`.observer`: the status observer: every interval, gather, decide and persist each server's observation.
- :mod:`.restore`: what should run, and running it (a revision applied, a canary placed or promoted, a trial).
- :mod:`.server_status`: the one writer of an SGLangServer's ``status`` and of the Events about it.
- :mod:`.testhooks`: fault injection for the end-to-end tests (the process dies at a named point).
- :mod:`.ticks`: the observer's tick: when each server is observed, and the shared slots.
- :mod:`.tuning`: the SGLangTuning controller: one runner per admitted tuning runs its trials.
- :mod:`.tuning_status`: the one writer of an SGLangTuning's ``status`` and of the Events about it.
- :mod:`.tunings`: the operator's tuning queue (its kopf handler of SGLangTuning events): which tunings run now."""
