"""Pure views behind ``history`` and ``diff``."""

from __future__ import annotations

import datetime as dt

from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.plugin.view import age, flag_diff, history_rows, parse_flags

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
