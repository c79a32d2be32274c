"""``python -m e2e.demo --tune`` end to end, as a new user runs it: its own local control plane, both CRDs
Established before the operator starts, the regressed 1/1/2 served, a Shadow SGLangTuning climbing numSteps from the
server's own 1/1/2 (each step printed), the recommendation 3/1/4 within 2 % of the known-good point, the server told
``SpeculativeSettings=False`` (BelowKnownBest) and ``tune best`` listing 3/1/4. About 150 s on 2 shared cores."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.conftest import local_bin_dir

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
ROOT = Path(__file__).resolve().parents[2]


def test_the_tuning_demo_climbs_from_the_servers_own_settings_to_its_recommendation() -> None:
    local_bin_dir()  # the control-plane cache must be there
    # the demo's pods on 127.204.x.y: apart from this run's own clusters and the ./demo test's (gw201)
    env = {**os.environ, "PYTEST_XDIST_WORKER": "gw202"}
    env.pop("KUBECONFIG", None)
    out = subprocess.run([sys.executable, "-m", "e2e.demo", "--tune"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=900)
    print(out.stdout)
    assert out.returncode == 0, f"{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    text = out.stdout
    assert text.index("CRD sglangtunings.sglang-operator.io installed") < text.index("-- operator running")
    steps = re.findall(r"^ +[\d.]+ s  \S+-trial-(\d+): (\S+(?: speculation)?) ", text, re.MULTILINE)
    settings = [s for _, s in steps]
    # the control trial, then the climb from 1/1/2
    assert settings[:4] == ["no speculation", "1/1/2", "2/1/3", "3/1/4"], steps
    assert "the climb starts at the server's own settings" in text and "↑ new best" in text
    assert re.search(r"^-- recommendation 3/1/4: [\d.]+ tok/s", text, re.MULTILINE), text[-3000:]
    assert "condition SpeculativeSettings=False, reason BelowKnownBest" in text
    assert re.search(r"the spec runs 1/1/2: [\d.]+ decode tok/s at concurrency 1 .*3/1/4 measured [\d.]+ decode tok/s",
                     text), text[-3000:]
    assert re.search(r"│ 1 +│ 3/1/4 │", text), text[-3000:]  # tune best
