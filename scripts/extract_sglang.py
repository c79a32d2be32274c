#!/usr/bin/env python3
"""Extract every known SGLang release's launch flags, metric families and dialect from its wheel (static, no import).

    python scripts/extract_sglang.py                  # the releases in data/releases.json → data/*.json
    python scripts/extract_sglang.py --from-pypi      # every release on PyPI from 0.4.6 to 0.5.23 (pip index)
    python scripts/extract_sglang.py --check          # fail if the committed data differs from a fresh extraction
    python scripts/extract_sglang.py --compare ../shared/sglang   # check 0.5.10/0.5.23 against reference dumps

For each release: ``pip download --no-deps sglang==X`` (cached in ``--wheel-dir``, default
``~/.cache/sglang-operator/wheels``), read ``sglang/srt/server_args.py`` (and ``arg_groups/``),
the metrics collector and the HTTP server with ``ast``, then write ``releases.json``, ``flags.json`` and
``metrics.json`` in the compact form of ``sglang_operator/sglang/_store.py``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "operator"))

from sglang_operator_tools.extract import build_release, download_wheel  # noqa: E402
from sglang_operator_tools.extract.compare import compare_flags, compare_metrics  # noqa: E402

from sglang_operator.sglang import _store  # noqa: E402
from sglang_operator.sglang.versions import SGLangVersion, parse_version  # noqa: E402

DATA = ROOT / "operator" / "sglang_operator" / "sglang" / "data"
OLDEST, NEWEST = SGLangVersion(0, 4, 6), SGLangVersion(0, 5, 23, 99)
WHEELS = Path.home() / ".cache" / "sglang-operator" / "wheels"


def pypi_releases() -> list[str]:
    """Releases of ``sglang`` on PyPI between :data:`OLDEST` and :data:`NEWEST` (``pip index versions``)."""
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "sglang"], check=True,
                         capture_output=True, text=True).stdout
    m = re.search(r"Available versions: (.*)", out)
    if not m:
        raise SystemExit(f"unexpected pip index output:\n{out}")
    found = []
    for text in m[1].split(","):
        try:
            v = parse_version(text)
        except ValueError:
            continue  # release candidates etc.
        if OLDEST <= v <= NEWEST:
            found.append(v)
    return [str(v) for v in sorted(found)]


def committed_releases(data: Path) -> list[str]:
    doc = json.loads((data / "releases.json").read_text(encoding="utf-8"))
    return [r["version"] for r in doc["releases"]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from-pypi", action="store_true", help="extract every PyPI release 0.4.6-0.5.23")
    p.add_argument("--wheel-dir", type=Path, default=WHEELS, help="where downloaded wheels are kept")
    p.add_argument("--out", type=Path, default=DATA, help="output directory")
    p.add_argument("--compare", type=Path, help="directory with reference flags-X.tsv / metrics-X.txt")
    p.add_argument("--check", action="store_true", help="do not write; exit 1 if the files differ")
    args = p.parse_args(argv)
    versions = pypi_releases() if args.from_pypi else committed_releases(DATA)
    docs = []
    for version in sorted(versions, key=parse_version):
        doc = build_release(download_wheel(version, args.wheel_dir), version)
        print(f"{version}: {len(doc['flags'])} flags, {len(doc['metrics'])} metrics ({doc['wheel']})")
        docs.append(doc)
        ref = args.compare / f"flags-{version}.tsv" if args.compare else None
        if ref is not None and ref.exists():
            metrics_ref = args.compare / f"metrics-{version}.txt"
            for kind, diffs in (
                ("flags", compare_flags(doc["flags"], ref.read_text())),
                ("metrics", compare_metrics(doc["metrics"], metrics_ref.read_text() if metrics_ref.exists() else "")),
            ):
                print(f"  {kind} vs reference: {'agree' if not diffs else f'{len(diffs)} differences'}")
                for d in diffs:
                    print(f"    {d}")
    status = 0
    for name, text in _store.encode(docs).items():
        path = args.out / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                print(f"stale: {path}")
                status = 1
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path} ({len(text.encode()) // 1024} KiB)")
    return status


if __name__ == "__main__":
    sys.exit(main())
