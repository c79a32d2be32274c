"""Command line of ``sglang-sim``: split off the entry point and the simulator's own ``--sim-*`` options.

Accepted forms (the fake kubelet runs ``sglang-sim <command...> <args...>``):
``python -m sglang.launch_server ARGS``, ``python3 -m sglang.launch_server ARGS`` (any ``python*`` path),
``sglang serve ARGS`` or bare ``ARGS``. ``--sim-*`` options may appear anywhere and are removed before the
SGLang argv is parsed. Each has an env fallback (``SGLANG_SIM_*``), used by the fake kubelet.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# option -> (env var, type)
SIM_OPTIONS: dict[str, tuple[str, type]] = {
    "--sim-sglang-version": ("SGLANG_SIM_VERSION", str),
    "--sim-gpu": ("SGLANG_SIM_GPU", str),
    "--sim-time-scale": ("SGLANG_SIM_TIME_SCALE", float),
    "--sim-load-seconds": ("SGLANG_SIM_LOAD_SECONDS", float),
    "--sim-warmup-seconds": ("SGLANG_SIM_WARMUP_SECONDS", float),
    "--sim-graph-seconds": ("SGLANG_SIM_GRAPH_SECONDS", float),
    "--sim-seed": ("SGLANG_SIM_SEED", int),
    "--sim-jitter": ("SGLANG_SIM_JITTER", float),
    "--sim-fault-accept-alpha": ("", float),
    "--sim-fault-throughput-drop-pct": ("", float),
    "--sim-fault-crash-after-s": ("", float),
    "--sim-fault-metrics-mode": ("", str),
    "--sim-fault-metrics-delay-s": ("", float),
    "--sim-fault-metrics-huge-mb": ("", float),
    "--sim-fault-metrics-label-mb": ("", float),
    "--sim-fault-metrics-series": ("", int),
    "--sim-fault-probe-mode": ("", str),
    "--sim-fault-probe-line-mb": ("", float),
    "--sim-fault-probe-chunks": ("", int),
    "--sim-fault-server-info-string-mb": ("", float),
    "--sim-fault-http-500-rate": ("", float),
    "--sim-fault-ready-flap-period-s": ("", float),
}
DEFAULTS: dict[str, Any] = {
    "time_scale": 1.0, "load_seconds": 20.0, "warmup_seconds": 1.0, "seed": 0, "jitter": 0.03,
    "graph_seconds": 0.0,
}


class SimUsageError(Exception):
    """A ``--sim-*`` option without a value or with a bad one (exit status 2)."""


@dataclass
class SimCommand:
    """The parsed command line: ``entry`` (e.g. ``("python3", "-m", "sglang.launch_server")`` or ``()``),
    the SGLang ``argv``, simulator options (snake-case keys without ``sim_``) and fault options."""

    entry: tuple[str, ...]
    argv: list[str]
    options: dict[str, Any] = field(default_factory=dict)
    faults: dict[str, Any] = field(default_factory=dict)

    @property
    def legacy_entry(self) -> bool:
        """True for ``python -m sglang.launch_server`` (SGLang then prints a UserWarning)."""
        return len(self.entry) == 3


def _split_entry(argv: list[str]) -> tuple[tuple[str, ...], list[str]]:
    if len(argv) >= 3 and os.path.basename(argv[0]).startswith("python") and argv[1] == "-m" \
            and argv[2] == "sglang.launch_server":
        return tuple(argv[:3]), argv[3:]
    if len(argv) >= 2 and os.path.basename(argv[0]) == "sglang" and argv[1] == "serve":
        return tuple(argv[:2]), argv[2:]
    return (), argv


def parse_command(argv: list[str], env: Mapping[str, str]) -> SimCommand:
    """Split ``argv`` (``sys.argv[1:]``); raises :class:`SimUsageError`."""
    rest: list[str] = []
    given: dict[str, str] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        name, eq, value = tok.partition("=")
        if name in SIM_OPTIONS:
            if not eq:
                if i + 1 >= len(argv):
                    raise SimUsageError(f"sglang-sim: error: argument {name}: expected one argument")
                value = argv[i + 1]
                i += 1
            given[name] = value
        else:
            rest.append(tok)
        i += 1
    entry, sgl_argv = _split_entry(rest)
    cmd = SimCommand(entry, sgl_argv, dict(DEFAULTS))
    for opt, (env_name, typ) in SIM_OPTIONS.items():
        raw = given.get(opt)
        if raw is None and env_name:
            raw = env.get(env_name) or None
        if raw is None:
            continue
        try:
            value_t: Any = typ(raw)
        except ValueError as exc:
            raise SimUsageError(f"sglang-sim: error: argument {opt}: invalid {typ.__name__} value: {raw!r}") from exc
        key = opt.removeprefix("--sim-").replace("-", "_")
        if key.startswith("fault_"):
            cmd.faults[key.removeprefix("fault_")] = value_t
        else:
            cmd.options[key] = value_t
    if float(cmd.options["time_scale"]) <= 0:
        raise SimUsageError("sglang-sim: error: argument --sim-time-scale: must be > 0")
    return cmd
