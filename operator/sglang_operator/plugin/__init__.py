"""The user's side of the revision ledger: ``history``, ``diff``, ``retry``, ``promote`` and ``undo`` (also the
kubectl plugin ``kubectl-sglang``). :mod:`.view` is pure (rows and flag diffs from status and
ControllerRevisions); :mod:`.commands` does the API calls and prints."""
