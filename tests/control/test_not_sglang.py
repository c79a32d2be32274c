"""A pod that answers HTTP but is not SGLang (issue 40 item 4): its ``/server_info`` read gives no settings and one
sentence naming ``spec.sglang.image`` (never the body it answered); settings are compared only once read back, so
no ``SettingsDiffer`` says SGLang runs as asked for a pod never read back."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from test_worker import SAMPLE

from sglang_operator.api.server import parse
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.control.gather import read_effective
from sglang_operator.io.sglang_http import ScrapeError

FOREIGN = {"status": "ok", "hello": "world", "path": "/server_info"}  # an echo server's JSON


class FakeHTTP:
    """Answers ``/server_info`` with ``answer`` (a dict) or raises it (a ScrapeError)."""

    def __init__(self, answer: dict[str, Any] | ScrapeError) -> None:
        self.answer, self.calls = answer, 0

    async def server_info(self, url: str, path: str, api_key: str | None = None) -> dict[str, Any]:
        self.calls += 1
        if isinstance(self.answer, ScrapeError):
            raise self.answer
        return self.answer


def _spec() -> Any:
    obj = copy.deepcopy(SAMPLE)
    obj["metadata"] = {"name": "a", "namespace": "ns", "uid": "uid-a"}
    return parse(obj).spec


def _status(effective: dict[str, Any] | None = None) -> SGLangServerStatus:
    return SGLangServerStatus.model_validate({"sglangVersion": "0.5.10", "revision": "abc",
                                             **({"effective": effective} if effective is not None else {})})


@pytest.mark.parametrize("answer", [FOREIGN, ScrapeError("parse", "http://10.0.0.1:30000/server_info: not JSON")])
async def test_a_pod_answering_something_else_is_named_in_one_sentence_with_the_field_to_fix(
        answer: dict[str, Any] | ScrapeError) -> None:
    spec = _spec()
    http = FakeHTTP(answer)
    effective, diffs, foreign = await read_effective(http, "http://10.0.0.1:30000", "0.5.10",  # type: ignore[arg-type]
                                                     _status(), spec, pod="a-0")
    assert effective is None and diffs is None  # nothing read back: no SettingsDiffer claim either way
    assert foreign is not None and foreign.count(". ") == 0 and foreign.startswith("pod a-0 answers /")
    assert "spec.sglang.image" in foreign and spec.sglang.image in foreign and "does not serve SGLang" in foreign
    assert "{" not in foreign and "hello" not in foreign and "not JSON" not in foreign  # no fragment of the body


async def test_settings_are_compared_only_once_read_back() -> None:
    spec = _spec()
    # an empty status.effective (only observedAt, as an older operator wrote for a foreign answer) is no read back:
    # /server_info is read again, and an SGLang answer is compared
    http = FakeHTTP({"model_path": "m", "speculative_algorithm": spec.speculative.algorithm.value,
                     "speculative_num_steps": spec.speculative.num_steps})
    effective, diffs, foreign = await read_effective(http, "http://10.0.0.1:30000", "0.5.10",  # type: ignore[arg-type]
                                                     _status({"observedAt": "2026-01-01T00:00:00Z"}), spec)
    assert http.calls == 1 and foreign is None
    assert effective is not None and effective["numSteps"] == spec.speculative.num_steps
    assert diffs == []  # what was read back is what the spec asks for
    http = FakeHTTP(FOREIGN)
    effective, diffs, foreign = await read_effective(http, "http://10.0.0.1:30000", "0.5.10",  # type: ignore[arg-type]
                                                     _status({"observedAt": "2026-01-01T00:00:00Z"}), spec)
    assert http.calls == 1 and effective is None and diffs is None and foreign is not None
