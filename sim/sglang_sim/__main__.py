"""``sglang-sim`` entry point (console script ``sglang_sim.__main__:main``).

Usage: ``sglang-sim [python -m sglang.launch_server | sglang serve] ARGS [--sim-* options]``. With
``--node-rank`` ≥ 1 it runs a non-zero node rank (:mod:`.follower`: dummy health server only).
Exit status: 0 after SIGTERM/SIGINT; 2 for argparse-level errors (unknown/renamed flag, bad value) and bad
``--sim-*`` options; 1 for errors SGLang raises during resolution or start-up (speculative/mamba rules,
out of memory), each with SGLang's message on stderr, and for a model the simulator cannot size (no profile, no
config: :func:`sglang_sim.profiles.load_model_profile`), refused where SGLang reads the model's config.
"""

from __future__ import annotations

import asyncio
import os
import sys

from sglang_sim.cli import SimUsageError, parse_command
from sglang_sim.facts import SimArgError, resolve, version_facts
from sglang_sim.follower import follow, node_rank
from sglang_sim.launch import launch
from sglang_sim.logfmt import SimLogger
from sglang_sim.profiles import UnknownModel, load_model_profile

LEGACY_WARNING = (
    "{path}:{line}: UserWarning: 'python -m sglang.launch_server' is still supported, but 'sglang serve' is the "
    "recommended entrypoint.\n  Example: sglang serve --model-path <model> [options]\n  warnings.warn("
)


def main(argv: list[str] | None = None) -> int:
    """Run the simulator; returns the process exit status."""
    env = dict(os.environ)
    try:
        cmd = parse_command(sys.argv[1:] if argv is None else argv, env)
        facts = version_facts(cmd.options.get("sglang_version"))
    except (SimUsageError, SimArgError) as exc:
        print(str(exc), file=sys.stderr)
        return 2
    missing = facts.entry_error(cmd.entry)  # e.g. `sglang serve` before 0.5.5
    if missing is not None:
        print(str(missing), file=sys.stderr)
        return missing.exit_code
    if facts.legacy_warns(cmd.entry):
        print(LEGACY_WARNING.format(path="/sgl-workspace/sglang/python/sglang/launch_server.py", line=57),
              file=sys.stderr)
    try:
        resolved = resolve(cmd.argv, facts, env, cmd.entry or ("sglang", "serve"))
    except SimArgError as exc:
        if exc.exit_code == 0:  # --help: printed by argparse
            return 0
        print(str(exc), file=sys.stderr)
        return exc.exit_code
    try:  # SGLang reads the model's config while resolving its arguments, before loading anything
        load_model_profile(str(resolved.server_args.get("model_path") or ""))
    except UnknownModel as exc:
        print(str(exc), file=sys.stderr)
        return 1
    logger = SimLogger(log_ms=env.get("SGLANG_LOG_MS") in ("1", "true"))
    try:
        if node_rank(resolved.server_args) >= 1:  # multi-node: only rank 0 serves the API
            return asyncio.run(follow(cmd, resolved, env, logger))
        return asyncio.run(launch(cmd, facts, resolved, env, logger))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
