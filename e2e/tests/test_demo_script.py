"""The README's first command, ``./demo``, in a clean shell: no virtualenv on PATH, no variable of this test run but
HOME (and XDG_CACHE_HOME), the control-plane cache present (the cold build is a figure, not a test). It reuses or
creates ``.venv``, installs (in this run's own virtualenv it finds the install done: the same line installed it),
reuses the control plane, and runs ``python -m e2e.demo --regress`` to the automatic rollback, printing one line per
stage with its time."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.conftest import local_bin_dir

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
ROOT = Path(__file__).resolve().parents[2]
INSTALL_STAMP = ROOT / ".venv" / ".demo-installed"  # what ./demo writes after its install (and then skips it)


def install_stamp() -> str:
    """``./demo``'s stamp: ``cat pyproject.toml sim/pyproject.toml tools/pyproject.toml | sha256sum``."""
    return hashlib.sha256(b"".join((ROOT / p).read_bytes() for p in
                                   ("pyproject.toml", "sim/pyproject.toml", "tools/pyproject.toml"))).hexdigest()


def test_the_demo_script_reaches_the_rollback_in_a_clean_shell() -> None:
    local_bin_dir()  # the control-plane cache must be there (pytest.fail names the build command otherwise)
    env = {"HOME": os.environ.get("HOME", "/root"), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
           # the demo's pods on 127.203.x.y: apart from this run's own clusters (127.1-3.x.y, xdist workers)
           "PYTEST_XDIST_WORKER": "gw201"}
    if os.environ.get("XDG_CACHE_HOME"):
        env["XDG_CACHE_HOME"] = os.environ["XDG_CACHE_HOME"]
    if Path(sys.prefix).resolve() == (ROOT / ".venv").resolve():
        # this run's own virtualenv, installed by the same line (.ci/run): a reinstall would swap the packages under
        # the other xdist worker's feet, so the script finds it installed (its install stage: "installed already")
        INSTALL_STAMP.write_text(install_stamp() + "\n")
    out = subprocess.run(["./demo"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    print(out.stdout)  # the stage times (shown with -s)
    assert out.returncode == 0, f"{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    stages = re.findall(r"^==> \[ *(\d+)s\] (\d)/4 (.+)$", out.stdout, re.MULTILINE)
    assert [s[1] for s in stages] == ["1", "2", "3", "4"], out.stdout[:3000]
    assert all(re.search(rf"^    {re.escape(s[2])}: \d+s$", out.stdout, re.MULTILINE) for s in stages), out.stdout
    assert re.search(r"^-- rolled back by itself: (\w{10}) serves again \d+ s after the regressed sample was applied$",
                     out.stdout, re.MULTILINE), out.stdout[-4000:]
    assert re.search(r"Degraded=True reason RolledBack: \w{10}: [\d.]+ tok/s, accept length", out.stdout), \
        out.stdout[-4000:]
    assert re.search(r"^==> \[ *\d+s\] done$", out.stdout, re.MULTILINE), out.stdout[-2000:]
