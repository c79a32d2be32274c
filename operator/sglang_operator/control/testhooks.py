"""Fault injection for the end-to-end tests: make the operator process die at a named point.

``SGLANG_OPERATOR_EXIT_AT=<point>[,<point>…]`` makes :func:`exit_at` end the process at once (``os._exit``, as a
SIGKILL would: no cleanup, no status write) the first time the operator passes that point. Points:

- ``WarmingUp`` / ``Verifying``: right after the analysis state of a revision was written in that phase;
- ``RollingBack``: right after a rollback was decided and written, before the stable revision is applied;
- ``CanaryStepping`` / ``CanaryPromoting`` / ``CanaryRemoving``: right after ``status.canary`` was written in that
  phase (:class:`~sglang_operator.api.analysis.CanaryPhase`), before the tick's placement is applied.

Unset in production; reading one environment variable is the whole cost.
"""

from __future__ import annotations

import logging
import os

ENV = "SGLANG_OPERATOR_EXIT_AT"
EXIT_CODE = 86


def exit_at(point: str) -> None:
    """End the process with :data:`EXIT_CODE` when ``point`` is named in ``$SGLANG_OPERATOR_EXIT_AT``."""
    if point in {p.strip() for p in os.environ.get(ENV, "").split(",") if p.strip()}:
        logging.getLogger("sglang_operator").error("test hook: exiting at %s", point)
        logging.shutdown()
        os._exit(EXIT_CODE)
