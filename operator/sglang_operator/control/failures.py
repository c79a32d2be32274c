"""What a failed apply leaves behind: of the analysis (a rollback's, a canary's placement, deletion or promotion, run
as the server's job by :class:`~sglang_operator.control.observer.Observer`), or of the reconcile handler
(:func:`handler_failed`). The one writer of the server memory's failure fields (``apply_failure``,
``apply_failure_reason``, ``apply_error``: :data:`sglang_operator.control.memory.WRITERS`).

A failure is a Warning event ``ApplyFailed`` once per distinct message, tried again next tick. A child whose name
another controller owner holds (:class:`~sglang_operator.control.children.ChildConflict`: a server named like this
one's canary workload, an object made by hand) is also a condition: ``Degraded=True`` reason ``ChildConflict``
naming the holder, shown by the next observation (:attr:`ServerMemory.apply_failure`) until an apply of that server
succeeds; its event is the one the condition's change posts.
"""

from __future__ import annotations

import logging

from sglang_operator.api.view import ServerView
from sglang_operator.control import server_status
from sglang_operator.control.children import CHILD_CONFLICT, ChildConflict
from sglang_operator.control.memory import ServerMemory

log = logging.getLogger("sglang_operator.control.failures")


async def job_failed(mem: ServerMemory, view: ServerView, revision: str, exc: Exception) -> None:
    """Record that applying ``revision`` for the server of ``view`` (its memory ``mem``) raised ``exc``, once per
    distinct message: a log line, and a conflict in ``mem.apply_failure`` (reason ``ChildConflict``), any other
    failure a Warning event."""
    message = f"applying revision {revision} failed: {exc}"
    conflict = isinstance(exc, ChildConflict)
    if conflict:  # shown by every observation while it lasts
        mem.apply_failure, mem.apply_failure_reason = str(exc), CHILD_CONFLICT
    if mem.apply_error == message:
        return  # tried again every tick: said once
    mem.apply_error = message
    log.warning("%s/%s: %s", mem.namespace, mem.name, message)
    if not conflict:  # a conflict's event is the one its condition's change posts
        await server_status.event(view.ref, "Warning", "ApplyFailed", message)


def job_succeeded(mem: ServerMemory) -> None:
    """An apply of the analysis succeeded: its failure is forgotten, and a conflict it recorded with it."""
    mem.apply_error = None
    if mem.apply_failure_reason == CHILD_CONFLICT:
        mem.apply_failure, mem.apply_failure_reason = None, "ApplyFailed"


def handler_failed(mem: ServerMemory, message: str, reason: str) -> bool:
    """The reconcile handler's apply failed with ``message`` (``reason``: ``ApplyFailed``, or ``ChildConflict`` when
    another owner holds a child's name), not the spec's fault: recorded in ``mem`` (shown by every observation as
    ``Degraded``) until an apply succeeds. Returns whether the failure is new for this server (one Warning event and
    log line each)."""
    new = mem.apply_failure != message
    mem.apply_failure, mem.apply_failure_reason = message, reason
    return new


def handler_succeeded(mem: ServerMemory) -> None:
    """The reconcile handler's apply succeeded: its failure (or a job's conflict) is forgotten."""
    mem.apply_failure, mem.apply_failure_reason = None, "ApplyFailed"
