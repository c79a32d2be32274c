"""The user's commands: the revision ledger's ``history``, ``diff``, ``retry``, ``promote``, ``abort`` and ``undo``,
``tune …`` and ``import`` (also the kubectl plugin ``kubectl-sglang``), with their own client.

- :mod:`.commands`: the ledger commands against the cluster (the API calls and what they print).
- :mod:`.importer`: an existing SGLang command line or systemd unit → an SGLangServer.
- :mod:`.specwrite`: the one way the CLI writes a server's spec (``undo``, ``tune apply``).
- :mod:`.tune`: ``tune start|status|plot|apply|best`` against the cluster.
- :mod:`.tunebest`: ``tune best``: the known best settings of a namespace as a table (pure).
- :mod:`.tunecost`: what a tuning will cost, for ``tune start --dry-run`` (pure).
- :mod:`.tuneplan`: what ``tune start``, ``tune status`` and ``tune apply`` compute (pure).
- :mod:`.tuneplot`: ``tune plot``: a tuning's objective over its settings (matplotlib).
- :mod:`.undo`: what ``undo`` writes into a server, and how (pure).
- :mod:`.view`: pure views of the ledger: history rows and the SGLang flags two revisions differ in."""
