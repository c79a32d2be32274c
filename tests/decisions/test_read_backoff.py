"""The per-server back-off of pod reads (pure): when a server whose pods time out is read again."""

from __future__ import annotations

import itertools

from sglang_operator.decisions.sampling.backoff import MAX_SECONDS, Backoff, after_reads, delay, may_read

PODS = ("a-0", "a-1")


def test_the_wait_doubles_per_timed_out_observation_up_to_the_cap() -> None:
    assert [delay(n, 5.0) for n in range(6)] == [0.0, 10.0, 20.0, 40.0, MAX_SECONDS, MAX_SECONDS]
    assert delay(3, 120.0) == 120.0  # never less than one interval, even above the cap
    assert delay(10_000, 5.0) == MAX_SECONDS  # no overflow


def test_a_server_whose_reads_time_out_is_read_less_and_less_often() -> None:
    state, now, reads = Backoff(), 0.0, []
    while now < 300.0:
        if may_read(state, now, PODS):
            reads.append(now)
            state = after_reads(state, now, 5.0, PODS, answered=0, timed_out=2)
        now += 5.0  # the observer's tick
    assert reads[:5] == [0.0, 10.0, 30.0, 70.0, 130.0]  # 10, 20, 40, then the 60 s cap
    assert all(b - a == MAX_SECONDS for a, b in itertools.pairwise(reads[4:]))
    assert len(reads) == 7  # instead of 60 reads in 300 s


def test_any_answer_resets_it() -> None:
    state = after_reads(Backoff(), 0.0, 5.0, PODS, answered=0, timed_out=1)
    state = after_reads(state, 10.0, 5.0, PODS, answered=0, timed_out=1)
    assert state.failures == 2 and not may_read(state, 20.0, PODS)
    state = after_reads(state, 30.0, 5.0, PODS, answered=1, timed_out=1)  # one pod answered: alive
    assert state == Backoff() and may_read(state, 30.0, PODS)


def test_no_read_leaves_it_and_other_failures_do_not_count() -> None:
    state = after_reads(Backoff(), 0.0, 5.0, PODS, answered=0, timed_out=1)
    assert after_reads(state, 3.0, 5.0, PODS, answered=0, timed_out=0) == state  # not due, or refused at once
    assert after_reads(Backoff(), 3.0, 5.0, PODS, answered=0, timed_out=0) == Backoff()


def test_other_pods_are_read_at_once() -> None:
    state = after_reads(Backoff(), 0.0, 5.0, PODS, answered=0, timed_out=2)
    assert not may_read(state, 5.0, PODS)
    assert not may_read(state, 5.0, reversed(PODS))  # the same pods in another order
    assert may_read(state, 5.0, ("b-0",))  # a new revision's pods
    fresh = after_reads(state, 5.0, 5.0, ("b-0",), answered=0, timed_out=1)
    assert fresh.failures == 1  # counted again from one for the new pods
