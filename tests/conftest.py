"""The unit tests' shared helpers (``tests/decisions/rollback_driver.py``, ``tests/decisions/sampling/expo.py``,
``tests/io/fakepods.py``, ``tests/io/apiprobe.py``, ``tests/control/fakekube.py``, ``tests/sim/simproc.py``,
``tests/api/schema_walk.py``)
importable from every test folder, whichever runs alone."""

from __future__ import annotations

import sys
from pathlib import Path

for folder in ("api", "decisions", "decisions/sampling", "io", "control", "sim"):
    path = str(Path(__file__).resolve().parent / folder)
    if path not in sys.path:
        sys.path.insert(0, path)
