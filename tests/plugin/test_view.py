"""Pure views behind ``history`` and ``diff``."""

from __future__ import annotations

import datetime as dt

import pytest

from sglang_operator.api.base import plural
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.plugin.view import (
    HISTORY_COLUMNS,
    age,
    baseline_line,
    flag_diff,
    history_cells,
    history_rows,
    history_table,
    no_status_hint,
    parse_flags,
    promote_warning,
    watched_namespaces,
)

GOOD = ("SGLANG_ENABLE_SPEC_V2=1 sglang serve --model-path Qwen/Qwen3.6-27B --tp-size 2 --enable-metrics "
        "--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 4 --mem-fraction-static 0.88 --context-length 131072 "
        "--max-running-requests 16 --mamba-full-memory-ratio 0.5 --mamba-scheduler-strategy extra_buffer")
BAD = ("SGLANG_ENABLE_SPEC_V2=1 sglang serve --model-path Qwen/Qwen3.6-27B --tp-size 2 --enable-metrics "
       "--speculative-algorithm NEXTN --speculative-num-steps 1 --speculative-eagle-topk 1 "
       "--speculative-num-draft-tokens 2 --mamba-scheduler-strategy extra_buffer")
NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def test_parse_flags_reads_env_flags_and_booleans() -> None:
    flags = parse_flags(GOOD)
    assert flags["SGLANG_ENABLE_SPEC_V2"] == "1"
    assert flags["--enable-metrics"] == "true"
    assert flags["--speculative-num-steps"] == "3"
    assert "sglang" not in flags and "serve" not in flags
    legacy = parse_flags("python -m sglang.launch_server --port=30000 --cuda-graph-bs 1 2 4")
    assert legacy["--cuda-graph-bs"] == "1 2 4" and legacy["--port"] == "30000"


def test_flag_diff_shows_the_published_incident() -> None:
    rows = {f: (a, b) for f, a, b in flag_diff(BAD, GOOD)}
    assert rows == {
        "--speculative-num-steps": ("1", "3"), "--speculative-num-draft-tokens": ("2", "4"),
        "--mem-fraction-static": ("—", "0.88"), "--context-length": ("—", "131072"),
        "--max-running-requests": ("—", "16"), "--mamba-full-memory-ratio": ("—", "0.5"),
    }
    assert flag_diff(GOOD, GOOD) == []


def test_age_like_kubectl() -> None:
    assert age("2026-12-01T11:59:15Z", NOW) == "45s"
    assert age("2026-12-01T11:48:00Z", NOW) == "12m"
    assert age("2026-12-01T08:00:00Z", NOW) == "4h"
    assert age("2026-11-28T12:00:00Z", NOW) == "3d"
    assert age(None, NOW) == "—"


def test_history_rows_join_status_and_controller_revisions() -> None:
    status = {"revision": "9699b6738c", "stableRevision": "9699b6738c", "revisions": [
        {"revision": "9699b6738c", "verdict": "Promoted", "tokensPerSecond": 51.6, "acceptLength": 2.73, "samples": 5,
         "createdAt": "2026-12-01T11:50:00Z"},
        {"revision": "9f4c2d9294", "verdict": "Rejected", "tokensPerSecond": 36.0, "acceptLength": 1.75,
         "reason": "36.0 tok/s < 0.85 × 51.6 tok/s", "createdAt": "2026-12-01T11:55:00Z"},
    ]}
    crs = [{"metadata": {"labels": {"sglang-operator.io/revision": "9699b6738c"},
                         "annotations": {"sglang-operator.io/image-digest": "docker.io/lmsysorg/sglang@sha256:ab"}},
            "revision": 1, "data": {"image": "lmsysorg/sglang:v0.5.10-cu129"}},
           {"metadata": {"labels": {"sglang-operator.io/revision": "9f4c2d9294"}}, "revision": 2,
            "data": {"image": "lmsysorg/sglang:v0.5.10-cu129"}}]
    good, bad = history_rows(SGLangServerStatus.model_validate(status), crs, NOW)
    assert (good.stable, good.serving, good.number, good.image) == (True, True, 1,
                                                                     "docker.io/lmsysorg/sglang@sha256:ab")
    assert (bad.stable, bad.serving, bad.verdict, bad.image) == (False, False, "Rejected",
                                                                  "lmsysorg/sglang:v0.5.10-cu129")
    assert bad.reason.startswith("36.0 tok/s") and good.age == "10m"


def _rows() -> list:  # type: ignore[type-arg]
    status = {"revision": "9699b6738c", "stableRevision": "9699b6738c", "revisions": [
        {"revision": "9699b6738c", "verdict": "Promoted", "tokensPerSecond": 51.6, "acceptLength": 2.73, "samples": 5,
         "acceptRate": 0.58, "createdAt": "2026-12-01T11:50:00Z", "baselineSource": "canaryRatio",
         "baselineTokensPerSecond": 54.73},
        {"revision": "9f4c2d9294", "verdict": "Rejected", "tokensPerSecond": 36.0, "acceptLength": 1.75,
         "samples": 3, "createdAt": "2026-12-01T11:55:00Z"},
    ]}
    crs = [{"metadata": {"labels": {"sglang-operator.io/revision": "9699b6738c"}, "annotations": {
        "sglang-operator.io/image-digest": "docker.io/lmsysorg/sglang@sha256:" + "f4e0eb578320" + "0" * 52}},
        "revision": 1, "data": {"image": "lmsysorg/sglang:v0.5.10-cu129"}}]
    return history_rows(SGLangServerStatus.model_validate(status), crs, NOW)


def test_history_shows_the_accept_rate_where_the_release_reported_it() -> None:
    good, bad = _rows()
    assert (good.accept_rate, bad.accept_rate) == (0.58, None)
    assert good.as_json()["acceptRate"] == 0.58
    cells = history_cells([good, bad])
    assert cells[0][HISTORY_COLUMNS.index("ACCEPT RATE")] == "0.58"
    assert cells[1][HISTORY_COLUMNS.index("ACCEPT RATE")] == "—"
    assert cells[0][-1] == "docker.io/lmsysorg/sglang@sha256:f4e0eb578320"  # a short digest, as docker shows IDs


@pytest.mark.parametrize("width", [200, 140, 120, 80, 60])
def test_history_fits_the_terminal(width: int) -> None:
    lines = history_table(_rows(), width)
    assert lines[0].split() == ["REVISION", "AGE", "VERDICT", "TOK/S", "ACCEPT", "LEN", "ACCEPT", "RATE",
                                "SAMPLES", *(["BASELINE"] if width >= 120 else []),
                                *(["IMAGE"] if width >= 140 else [])]
    if width >= 80:
        assert max(map(len, lines)) <= width, lines
    if width < 140:  # the images on lines of their own
        assert lines[-2:] == ["9699b6738c image: docker.io/lmsysorg/sglang@sha256:f4e0eb578320",
                              "9f4c2d9294 image: —"]
    if width < 120:  # then the baselines
        assert lines[-4:-2] == ["9699b6738c baseline: 54.7 canaryRatio", "9f4c2d9294 baseline: —"]
    assert any(line.startswith("★▶  9699b6738c") for line in lines)


def test_history_shows_where_each_baseline_came_from() -> None:
    good, bad = _rows()
    cells = history_cells([good, bad])
    column = HISTORY_COLUMNS.index("BASELINE")
    assert (cells[0][column], cells[1][column]) == ("54.7 canaryRatio", "—")
    assert good.as_json()["baselineSource"] == "canaryRatio" and bad.as_json()["baselineSource"] is None
    status = SGLangServerStatus.model_validate({"revision": "9699b6738c", "baseline": {
        "revision": "9699b6738c", "tokensPerSecond": 54.73, "samples": 6, "source": "canaryRatio", "ratio": 1.04,
        "scaledFrom": "5b7e01aa42", "at": "2026-12-01T12:00:00Z"}})
    assert baseline_line(status) == ("baseline: 9699b6738c 54.7 tok/s (canaryRatio: 52.6 tok/s of 5b7e01aa42 × "
                                     "1.04), set 2026-12-01T12:00:00Z")
    assert baseline_line(SGLangServerStatus()) is None


def test_promote_warns_below_min_samples() -> None:
    def status(samples: int) -> SGLangServerStatus:
        return SGLangServerStatus.model_validate({"revision": "r1", "analysis": {
            "revision": "r1", "phase": "Verifying", "since": "2026-12-01T11:58:00Z",
            "progressStartedAt": "2026-12-01T11:57:00Z",
            "validFigures": [{"tokensPerSecond": 50.0}] * samples}})

    assert promote_warning(status(1), 5) == ("revision r1 has 1 measured sample of spec.rollback.minSamples 5: its "
                                             "baseline, the median of it, is less certain than a verified revision's")
    assert "has 3 measured samples of spec.rollback.minSamples 5" in (promote_warning(status(3), 5) or "")
    assert "no measured sample yet" in (promote_warning(status(0), 5) or "")
    assert promote_warning(status(5), 5) is None


def test_plural() -> None:
    assert (plural(1, "sample"), plural(0, "sample"), plural(2, "pod")) == ("1 sample", "0 samples", "2 pods")
    assert plural(2, "query", "queries") == "2 queries"


def test_history_shows_canary_steps() -> None:
    from sglang_operator.plugin.view import canary_lines

    step = {"step": 1, "replicas": 1, "stableReplicas": 3, "verdict": "Failed", "reason": "36.0 tok/s < 0.85 × 51.6",
            "at": "2026-05-01T10:00:00Z", "samples": 3, "tokensPerSecond": 36.0, "stableTokensPerSecond": 51.6}
    status = SGLangServerStatus.model_validate({
        "revisions": [{"revision": "9f4c2d9294", "verdict": "Rejected", "canarySteps": [step]}],
        "canary": {"revision": "5b7e01aa42", "stableRevision": "9699b6738c", "workload": "s-canary",
                   "phase": "Stepping", "step": 0, "steps": 2, "canaryReplicas": 1, "stableReplicas": 3,
                   "split": "3+1", "startedAt": "2026-05-01T10:00:00Z", "movedAt": "2026-05-01T10:00:00Z",
                   "judged": 2}})
    lines = canary_lines(status)
    assert lines[0] == ("9f4c2d9294: canary step 1 at 3+1 (stable+canary): Failed, 36.0 vs 51.6 tok/s of the stable "
                        "pods (3 intervals); 36.0 tok/s < 0.85 × 51.6")
    assert lines[1] == "5b7e01aa42: canary step 1/2 at 3+1 (stable+canary), 2 intervals passed at this step"


def operator_deployment(namespace: str, name: str, watch: list[str], ready: int = 1) -> dict[str, object]:
    """The chart's operator Deployment, as listed (``--namespace=`` per watchNamespaces entry)."""
    args = ["--liveness=http://0.0.0.0:8080/healthz", "--leader-elect-resource-namespace=ops",
            *(f"--namespace={n}" for n in watch)]
    return {"metadata": {"namespace": namespace, "name": name}, "spec": {"replicas": 2, "template": {"spec": {
        "containers": [{"name": "operator", "command": ["sglang-operator", "run"], "args": args}]}}},
            "status": {"readyReplicas": ready}}


def test_a_server_without_status_says_which_operator_watches_its_namespace() -> None:
    scoped = operator_deployment("ops", "rel-sglang-operator", ["team-a", "team-b"])
    assert watched_namespaces(scoped) == ("team-a", "team-b")
    assert watched_namespaces(operator_deployment("ops", "all", [])) is None
    assert watched_namespaces({"spec": {"template": {"spec": {"containers": [
        {"args": ["run", "-n", "x", "--namespace", "y"]}]}}}}) == ("x", "y")
    head = "SGLangServer ml/qwen36-27b has no status: no operator has reconciled it."
    lines = no_status_hint("ml", "qwen36-27b", [scoped])
    assert lines[0] == head
    assert lines[1].startswith("No operator watches namespace ml: ops/rel-sglang-operator watches team-a, team-b. "
                               "Add ml to the chart's watchNamespaces")
    assert "My server has no status" in lines[1]
    watching = no_status_hint("team-b", "s", [scoped, operator_deployment("ops2", "everywhere", [], ready=0)])
    assert watching[1].startswith("Watching namespace team-b: ops/rel-sglang-operator (namespaces team-a, team-b, "
                                  "1/2 ready); ops2/everywhere (every namespace, 0/2 ready). Is it running")
    assert "No sglang-operator Deployment" in no_status_hint("ml", "s", [])[1]
    assert "could not be listed" in no_status_hint("ml", "s", None)[1]


def test_history_of_a_server_without_status_prints_the_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from sglang_operator.plugin import commands

    class Client:
        def get(self, *_: object, **__: object) -> object:
            return type("S", (), {"to_dict": lambda _s: {"metadata": {"name": "qwen36-27b", "namespace": "ml"},
                                                         "spec": {}}})()

        def list(self, resource: object, **kwargs: object) -> list[object]:
            if getattr(resource, "__name__", "") == "Deployment":
                assert kwargs["namespace"] == "*" and kwargs["labels"] == {"app.kubernetes.io/name": "sglang-operator"}
                dep = operator_deployment("ops", "rel-sglang-operator", ["team-a"])
                return [type("D", (), {"to_dict": lambda _s: dep})()]
            return []

    monkeypatch.setattr(commands, "_client", lambda: Client())
    out = CliRunner().invoke(commands.app, ["history", "qwen36-27b", "-n", "ml"])
    assert out.exit_code == 0, out.output
    assert "No operator watches namespace ml: ops/rel-sglang-operator watches team-a" in out.output
    assert "REVISION" in out.output  # the (empty) table still follows
