"""The tuning queue (decisions/tuning/queue.py): who runs among the SGLangTunings of the whole operator — none whose
server is missing, one per server, at most the operator's limit, begun ones first and then the oldest; a waiting
tuning's reason and message never depend on its place in the queue."""

from __future__ import annotations

from sglang_operator.decisions.tuning.inplace import TuningRequest
from sglang_operator.decisions.tuning.queue import QUEUED, SERVER_NOT_FOUND, Candidate, admit


def cand(name: str, server: str, created: str, *, ns: str = "ns", started: bool = False,
         active: bool = True) -> Candidate:
    return Candidate(ns, server, TuningRequest(name=name, in_place=False, active=active, started=started,
                                               created=f"2026-01-01T00:00:{created}Z"))


SERVERS = {("ns", "a"), ("ns", "b"), ("ns", "c"), ("other", "a")}


def test_tunings_of_a_missing_server_wait_and_none_runs() -> None:
    got = admit([cand(f"t{i:03d}", "gone", f"{i % 60:02d}") for i in range(600)], SERVERS, 2)
    assert got.run == frozenset()
    assert len(got.waiting) == 600
    assert {w.reason for w in got.waiting.values()} == {SERVER_NOT_FOUND}
    assert len({w.message for w in got.waiting.values()}) == 1  # the same words for all: no rewrite as they move


def test_one_tuning_per_server_the_oldest_first() -> None:
    got = admit([cand("young", "a", "30"), cand("old", "a", "10"), cand("mid", "a", "20")], SERVERS, 5)
    assert got.run == {("ns", "old")}
    assert {k: w.reason for k, w in got.waiting.items()} == {("ns", "young"): QUEUED, ("ns", "mid"): QUEUED}


def test_a_tuning_that_began_keeps_its_server_before_an_older_one() -> None:
    got = admit([cand("old", "a", "10"), cand("running", "a", "20", started=True)], SERVERS, 5)
    assert got.run == {("ns", "running")}
    assert got.waiting[("ns", "old")].reason == QUEUED


def test_the_operator_limit_admits_the_oldest_servers_first_tunings_in_creation_order() -> None:
    tunings = [cand("t3", "c", "03"), cand("t1", "a", "01"), cand("t2", "b", "02"), cand("t1b", "a", "00"),
               cand("t4", "a", "04", ns="other")]
    got = admit(tunings, SERVERS, 2)
    # the servers' firsts: t1b (a, 00), t2 (b, 02), t3 (c, 03), t4 (other/a, 04); two run
    assert got.run == {("ns", "t1b"), ("ns", "t2")}
    assert {k: w.reason for k, w in got.waiting.items()} == {
        ("ns", "t1"): QUEUED, ("ns", "t3"): QUEUED, ("other", "t4"): QUEUED}
    assert "at most 2" in got.waiting[("ns", "t3")].message  # behind the operator's limit
    assert "one at a time per server" in got.waiting[("ns", "t1")].message  # behind its server's first
    # when one ends, the next in creation order runs and nobody else's wait changes
    after = admit([c for c in tunings if c.request.name != "t2"], SERVERS, 2)
    assert after.run == {("ns", "t1b"), ("ns", "t3")}
    assert after.waiting[("other", "t4")] == got.waiting[("other", "t4")]


def test_begun_tunings_come_first_under_the_operator_limit() -> None:
    got = admit([cand("new", "a", "01"), cand("begun", "b", "50", started=True)], SERVERS, 1)
    assert got.run == {("ns", "begun")}
    assert got.waiting[("ns", "new")].reason == QUEUED


def test_ended_or_deleted_tunings_neither_run_nor_wait_nor_hold_a_place() -> None:
    got = admit([cand("done", "a", "01", active=False), cand("next", "a", "02")], SERVERS, 1)
    assert got.run == {("ns", "next")}
    assert got.waiting == {}


def test_a_limit_below_one_counts_as_one_and_equal_times_order_by_namespace_and_name() -> None:
    got = admit([cand("b", "a", "01"), cand("a", "b", "01"), cand("z", "a", "01", ns="other")], SERVERS, 0)
    assert got.run == {("ns", "a")}
