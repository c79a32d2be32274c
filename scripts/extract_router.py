#!/usr/bin/env python3
"""Extract the pinned router's flag table (``smg``, SGLang's Model Gateway) from its wheel.

    python scripts/extract_router.py            # smg==ROUTER_VERSION → sglang_operator/sglang/data/router-flags.json
    python scripts/extract_router.py --check    # fail if the committed table differs from a fresh extraction

``pip download --no-deps smg==<sglang_operator.sglang.versions.ROUTER_VERSION>`` (cached in ``--wheel-dir``, default
``~/.cache/sglang-operator/wheels``), unpack it and read the argparse parser that
``smg/launch_router.py:parse_router_args`` builds (:mod:`sglang_operator_tools.extract.router` says why not
statically); written in :func:`sglang_operator.sglang._store.dump`'s deterministic form. Needs network on the
first run (PyPI) and a Linux x86_64 host (the wheel carries the router's Rust core, an abi3 extension).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "operator"))

from sglang_operator_tools.extract.router import build_router_table, download_router_wheel  # noqa: E402

from sglang_operator.sglang import _store  # noqa: E402
from sglang_operator.sglang.flags import ROUTER_FLAGS_FILE  # noqa: E402
from sglang_operator.sglang.versions import ROUTER_VERSION  # noqa: E402

OUT = ROOT / "operator" / "sglang_operator" / "sglang" / "data" / ROUTER_FLAGS_FILE
WHEELS = Path.home() / ".cache" / "sglang-operator" / "wheels"
GENERATOR = "python scripts/extract_router.py (from the smg wheel; --check re-checks)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wheel-dir", type=Path, default=WHEELS, help="where downloaded wheels are kept")
    p.add_argument("--out", type=Path, default=OUT, help="output file")
    p.add_argument("--check", action="store_true", help="do not write; exit 1 if the file differs")
    args = p.parse_args(argv)
    doc = build_router_table(download_router_wheel(ROUTER_VERSION, args.wheel_dir), ROUTER_VERSION, GENERATOR)
    text = _store.dump(doc)
    print(f"smg {ROUTER_VERSION}: {len(doc['flags'])} flags ({doc['wheel']})")
    if args.check:
        if not args.out.exists() or args.out.read_text(encoding="utf-8") != text:
            print(f"stale: {args.out}")
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({len(text.encode()) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
