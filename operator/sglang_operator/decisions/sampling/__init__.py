"""Per-revision samples, pure: what the operator reads from SGLang's ``/metrics`` and computes from two scrapes.
The I/O that scrapes pods is :mod:`sglang_operator.io.sampler` (and, for a tuning's trials,
:mod:`sglang_operator.io.trialbench`).

- :mod:`.backoff`: when the observer reads a server's pods again after its reads timed out.
- :mod:`.budget`: the per-server CPU budget of parsing its scrapes, and the back-off of a server over it.
- :mod:`.cache`: the parser's memory of one pod's sample lines between scrapes, bounded by bytes.
- :mod:`.compute`: one revision's :class:`~.model.Sample` from the previous and the current scrape of its pods.
- :mod:`.limits`: the bounds on what the operator reads from a pod (:class:`~.limits.ScrapeLimits`,
  :class:`~.limits.ProbeLimits`).
- :mod:`.loghist`: a fixed log-bucket histogram of durations, for quantiles in fixed memory.
- :mod:`.model`: the typed values of an interval: :class:`~.model.Sample`, its figures, the pods it saw.
- :mod:`.probing`: which pod of a revision the probe goes to next (one whose speculative gauges are not written yet
  keeps it).
- :mod:`.parse`: the filtered parse of Prometheus' text exposition into a :class:`~.parse.Parsed` scrape.
- :mod:`.retain`: what the sampler keeps of a pod's scrape until the next one, and its bounds.
- :mod:`.roles`: the metric names each figure reads, per release."""
