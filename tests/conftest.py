"""The unit tests' shared helpers (``tests/reconcile/rollback_driver.py``, ``tests/sampling/fakepods.py``,
``tests/control/fakekube.py``) importable from every test folder, whichever runs alone."""

from __future__ import annotations

import sys
from pathlib import Path

for folder in ("reconcile", "sampling", "control"):
    path = str(Path(__file__).resolve().parent / folder)
    if path not in sys.path:
        sys.path.insert(0, path)
