"""A stand-in for the Kubernetes discovery call that tells whether an API is served (KEDA's ScaledObject, the
Prometheus Operator's PodMonitor): it answers from a script and counts its calls."""

from __future__ import annotations


class Probe:
    """Answers ``answers[calls]`` (the last one once the script runs out): ``True``/``False`` served or not, an
    exception raised; ``calls`` counts the calls."""

    def __init__(self, answers: list[bool | Exception]) -> None:
        self.answers = answers
        self.calls = 0

    async def __call__(self) -> bool:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        if isinstance(answer, Exception):
            raise answer
        return answer
