"""Benchmark: loading the per-release SGLang data and rendering against it (issue 9).

Prints, each in a fresh interpreter (``python -X importtime`` noise excluded):

- import of ``sglang_operator.sglang.versions`` (reads ``data/releases.json``);
- ``args.warm_up()``: the argparse parser of every distinct flag table (what the operator builds at start-up);
- one ``builders.check`` of a minimal spec per release, first call (parser already warm) and steady state;
- the installed size of ``data/*.json``.

    python bench/sglang_data.py            # all releases
    python bench/sglang_data.py --repeat 50
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "operator"))

_IMPORT = "import time; t = time.perf_counter(); import sglang_operator.sglang.versions; " \
          "print(time.perf_counter() - t)"


def _spec(version: str) -> dict[str, object]:
    return {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer", "metadata": {"name": "b"},
            "spec": {"sglang": {"image": f"lmsysorg/sglang:v{version}"}, "model": {"path": "Qwen/Qwen3-8B"},
                     "parallelism": {"tensor": 2}}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=20, help="steady-state renders per release")
    args = p.parse_args()
    imports = [float(subprocess.run([sys.executable, "-c", _IMPORT], check=True, capture_output=True, text=True,
                                    env={"PYTHONPATH": str(ROOT / "operator")}).stdout) for _ in range(3)]
    print(f"import sglang.versions: {1000 * statistics.median(imports):.0f} ms (median of 3 fresh interpreters)")

    from sglang_operator.api import parse
    from sglang_operator.builders import check
    from sglang_operator.sglang import args as sglang_args
    from sglang_operator.sglang import catalog

    t = time.perf_counter()
    sglang_args.warm_up()
    tables = len({r.flags_table for r in catalog.releases()})
    n = len(catalog.releases())
    print(f"warm_up: {1000 * (time.perf_counter() - t):.0f} ms for {tables} parsers ({n} releases)")
    first, steady = [], []
    for r in catalog.releases():
        spec = parse(_spec(str(r.version))).spec
        t = time.perf_counter()
        assert check(spec).valid
        first.append(time.perf_counter() - t)
        for _ in range(args.repeat):
            t = time.perf_counter()
            check(spec)
            steady.append(time.perf_counter() - t)
    print(f"check() first per release: median {1000 * statistics.median(first):.2f} ms, max {1000 * max(first):.2f} ms")
    print(f"check() steady: median {1000 * statistics.median(steady):.2f} ms, "
          f"p99 {1000 * sorted(steady)[int(0.99 * len(steady))]:.2f} ms")
    data = resources.files("sglang_operator.sglang") / "data"
    size = sum(len((data / n).read_bytes()) for n in ("releases.json", "flags.json", "metrics.json"))
    print(f"installed data: {size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
