"""The tuning queue (decisions/tuning/queue.py): who runs among the SGLangTunings of the whole operator — none whose
server is missing, one per server, at most the operator's limit shared across namespaces (⌈limit ÷ namespaces⌉
each, round robin), begun ones first and then the oldest; a running tuning outside the fair pick yields at its next
trial boundary; a waiting tuning's reason and message never depend on its place in the queue nor name another
tenant's tunings (issue 42 item 1)."""

from __future__ import annotations

from sglang_operator.decisions.tuning.inplace import TuningRequest
from sglang_operator.decisions.tuning.queue import QUEUED, SERVER_NOT_FOUND, Candidate, admit, share


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
    tunings = [cand("t3", "c", "03"), cand("t1", "a", "01"), cand("t2", "b", "02"), cand("t1b", "a", "00")]
    got = admit(tunings, SERVERS, 2)
    # the servers' firsts: t1b (a, 00), t2 (b, 02), t3 (c, 03); one namespace: two run
    assert got.run == {("ns", "t1b"), ("ns", "t2")} and got.yielding == frozenset()
    assert {k: w.reason for k, w in got.waiting.items()} == {("ns", "t1"): QUEUED, ("ns", "t3"): QUEUED}
    assert "at most 2" in got.waiting[("ns", "t3")].message  # behind the operator's limit
    assert "one at a time per server" in got.waiting[("ns", "t1")].message  # behind its server's first
    # when one ends, the next in creation order runs and nobody else's wait changes
    after = admit([c for c in tunings if c.request.name != "t2"], SERVERS, 2)
    assert after.run == {("ns", "t1b"), ("ns", "t3")}
    assert after.waiting[("ns", "t1")] == got.waiting[("ns", "t1")]


def test_the_limit_is_shared_across_namespaces_round_robin() -> None:
    """Two namespaces and a limit of 2: one slot each, whatever the ages; a third namespace gets the next free slot
    before a namespace's second tuning."""
    tunings = [cand("t1b", "a", "00"), cand("t2", "b", "02"), cand("t3", "c", "03"), cand("t4", "a", "04", ns="other")]
    got = admit(tunings, SERVERS, 2)
    assert got.run == {("ns", "t1b"), ("other", "t4")}
    assert got.waiting[("ns", "t2")].reason == QUEUED and got.waiting[("ns", "t3")].reason == QUEUED
    servers = {*SERVERS, ("third", "x")}
    three = admit([*tunings, cand("t5", "x", "05", ns="third")], servers, 3)
    assert three.run == {("ns", "t1b"), ("other", "t4"), ("third", "t5")}


def test_a_namespace_gets_at_most_its_share_even_with_slots_left() -> None:
    """The share is ⌈limit ÷ namespaces⌉: with a limit of 4, 5 tunings of alice and 1 of bob, alice runs 2."""
    servers = {("alice", f"s{i}") for i in range(5)} | {("bob", "s0")}
    tunings = [cand(f"a{i}", f"s{i}", f"0{i}", ns="alice") for i in range(5)] + [cand("b0", "s0", "09", ns="bob")]
    got = admit(tunings, servers, 4)
    assert got.run == {("alice", "a0"), ("alice", "a1"), ("bob", "b0")}
    assert (share(4, 2), share(2, 2), share(2, 3), share(5, 2), share(0, 0)) == (2, 1, 1, 3, 1)


def test_a_running_tuning_over_its_namespaces_share_yields_and_its_slot_goes_to_the_other_namespace() -> None:
    """alice's two tunings run (limit 2); bob's arrives: alice's younger one is yielding (it keeps its slot to its
    next trial boundary) and bob's waits; once it stopped, bob's runs and alice's waits with the same words as any
    wait, naming no tenant."""
    servers = {("alice", "s1"), ("alice", "s2"), ("bob", "s1")}
    a1, a2 = cand("a1", "s1", "01", ns="alice", started=True), cand("a2", "s2", "02", ns="alice", started=True)
    b1 = cand("b1", "s1", "10", ns="bob")
    running = {a1.key, a2.key}
    assert admit([a1, a2], servers, 2, running) == admit([a1, a2], servers, 2, running)
    alone = admit([a1, a2], servers, 2, running)
    assert alone.run == running and alone.yielding == frozenset() and alone.waiting == {}
    got = admit([a1, a2, b1], servers, 2, running)
    assert got.run == running and got.yielding == {a2.key}
    assert got.waiting[b1.key].reason == QUEUED
    stopped = admit([a1, a2, b1], servers, 2, {a1.key})  # a2's runner stopped at its trial boundary
    assert stopped.run == {a1.key, b1.key} and stopped.yielding == frozenset()
    assert stopped.waiting[a2.key] == got.waiting[b1.key]
    assert "alice" not in got.waiting[b1.key].message and "bob" not in stopped.waiting[a2.key].message
    # bob's tuning went before a2 reached its boundary: a2 keeps running, no longer yielding
    assert admit([a1, a2], servers, 2, running).yielding == frozenset()


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
