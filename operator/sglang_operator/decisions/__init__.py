"""Pure decisions: Kubernetes objects and SGLang readings in, status and actions out. No I/O, no clock.

- :mod:`.actions`: the actions the rollback and canary decisions ask the observer to carry out.
- :mod:`.autoscaling`: what the server's loop says to its autoscaler after a tick (the pause, the target).
- :mod:`.baseline`: where a stable revision's baseline comes from, and what keeps a passing slowdown from
  lowering it.
- :mod:`.canary`: the canary's steps (``spec.strategy.type: Canary``), called by :func:`.rollback.step`.
- :mod:`.capacity`: a revision's capacity per replica from the speeds the namespace's tunings measured.
- :mod:`.conditions`: Kubernetes conditions (``metav1.Condition``), merged the way controllers do.
- :mod:`.criteria`: one measured sample checked against ``spec.rollback``'s floors and the baseline.
- :mod:`.derive`: the conditions the observer owns, from pod health and the analysis.
- :mod:`.effective`: what SGLang really runs (``/server_info``) against what the spec asked for.
- :mod:`.groups`: the health of a multi-node server's LeaderWorkerSet groups.
- :mod:`.judging`: one tick of the rollback analysis (judging a revision), over the stored status.
- :mod:`.observation`: one observation of one server decided (gather → decide → persist).
- :mod:`.owners`: whose pod it is: the owner chain a pod must have to count as a server's.
- :mod:`.placement`: what a placement of a revision is, decided before the apply path writes it.
- :mod:`.pods`: the health of a server's pods, from its Deployment and Pod objects.
- :mod:`.rollback`: the rollback decision, :func:`.rollback.step`, and the "what should run" rule.
- :mod:`.rollback_state`: the rollback decision's state and inputs.
- :mod:`.rollback_verdicts`: the rollback decision's verdicts and what follows them (promote, reject, roll back).
- :mod:`.sampling`: per-revision samples from SGLang's ``/metrics`` (parse, compute, bounds).
- :mod:`.starts`: the start-up check of a revision's pods (the analysis' warm-up, a canary's step).
- :mod:`.status`: what to write in ``status`` after an apply, a refused spec, an observation; the ledger entries.
- :mod:`.tuning`: speculative-decoding tuning: the search, the trials, the InPlace hold, the known best."""
