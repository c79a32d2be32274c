"""Pure decisions: Kubernetes objects and SGLang readings in, status and actions out (conditions, pod health, the
rollback decision :func:`.rollback.step`); :mod:`.sampling`: typed samples computed from two scrapes. No I/O."""
