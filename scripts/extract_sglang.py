#!/usr/bin/env python3
"""Extract SGLang's launch flags and Prometheus metric families from released wheels (static, no import).

    python scripts/extract_sglang.py                    # all supported versions → operator/.../sglang/data/
    python scripts/extract_sglang.py 0.5.10 --wheel-dir /tmp/wheels
    python scripts/extract_sglang.py --compare ../shared/sglang   # check against reference dumps
    python scripts/extract_sglang.py --check            # fail if the committed JSON is stale

For each version: ``pip download --no-deps sglang==X``, read ``sglang/srt/server_args.py`` (and, from
0.5.20, ``sglang/srt/arg_groups/fields/*.py``) and ``sglang/srt/observability/metrics_collector.py``
with ``ast``, and write ``flags-X.json`` / ``metrics-X.json``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "operator"))

from sglang_operator.sglang.extract import build_tables, download_wheel, dump_json  # noqa: E402
from sglang_operator.sglang.extract.compare import compare_flags, compare_metrics  # noqa: E402
from sglang_operator.sglang.versions import SUPPORTED  # noqa: E402

DATA = ROOT / "operator" / "sglang_operator" / "sglang" / "data"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("versions", nargs="*", help="SGLang versions (default: all supported)")
    p.add_argument("--wheel-dir", type=Path, help="where to keep downloaded wheels (default: a temp dir)")
    p.add_argument("--out", type=Path, default=DATA, help="output directory")
    p.add_argument("--compare", type=Path, help="directory with reference flags-X.tsv / metrics-X.txt")
    p.add_argument("--check", action="store_true", help="do not write; exit 1 if the files differ")
    args = p.parse_args(argv)
    versions = args.versions or [str(v) for v in SUPPORTED]
    status = 0
    with tempfile.TemporaryDirectory() as tmp:
        wheel_dir = args.wheel_dir or Path(tmp)
        for version in versions:
            wheel = download_wheel(version, wheel_dir)
            flags_doc, metrics_doc = build_tables(wheel, version)
            print(f"{version}: {len(flags_doc['flags'])} flags, {len(metrics_doc['metrics'])} metrics")
            for kind, doc in (("flags", flags_doc), ("metrics", metrics_doc)):
                path = args.out / f"{kind}-{version}.json"
                text = dump_json(doc)
                if args.check:
                    if not path.exists() or path.read_text() != text:
                        print(f"  stale: {path}")
                        status = 1
                else:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text)
            if args.compare:
                for kind, diffs in (
                    ("flags", compare_flags(flags_doc["flags"], _read(args.compare / f"flags-{version}.tsv"))),
                    ("metrics", compare_metrics(metrics_doc["metrics"],
                                                _read(args.compare / f"metrics-{version}.txt"))),
                ):
                    print(f"  {kind} vs reference: {'agree' if not diffs else f'{len(diffs)} differences'}")
                    for d in diffs:
                        print(f"    {d}")
    return status


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


if __name__ == "__main__":
    sys.exit(main())
