"""The Dockerfile, without a Docker engine: its steps run as written, paths moved into a temporary directory.

The build stage's COPY and RUN (``pip wheel`` of the project and every dependency, from PyPI) and the runtime
stage's virtual environment (``venv --without-pip``, ``pip --python … install --no-index --find-links``) run
exactly as the Dockerfile spells them; the two steps that would change this machine (``pip uninstall`` of the
base interpreter's pip, ``useradd``) are checked to be there instead. Then both targets' ENTRYPOINTs, and the
simulator image's ``sglang`` shims, answer ``--help`` from a read-only working directory, with a read-only
environment (as root: without the capabilities that ignore file modes). Also: the base is pinned by tag and digest,
the final targets run non-root, and no build tool is left in the environment.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
UID = 65532
pytestmark = pytest.mark.network  # pip wheel downloads the dependencies from PyPI, as `docker build` does


@dataclass
class Stage:
    name: str
    base: str
    steps: list[tuple[str, str]] = field(default_factory=list)  # (INSTRUCTION, arguments)

    def all(self, instruction: str) -> list[str]:
        return [args for ins, args in self.steps if ins == instruction]


def parse(text: str) -> tuple[dict[str, str], dict[str, Stage]]:
    """The global ARGs and the stages of a Dockerfile (continuations joined, comments dropped)."""
    lines, current = [], ""
    for raw in text.splitlines():
        if not current and raw.lstrip().startswith("#"):
            continue
        current += raw.rstrip("\\").strip() + " " if raw.endswith("\\") else raw.strip()
        if not raw.endswith("\\"):
            if current.strip():
                lines.append(current.strip())
            current = ""
    args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    stage: Stage | None = None
    for line in lines:
        ins, _, rest = line.partition(" ")
        ins = ins.upper()
        if ins == "ARG" and stage is None:
            key, _, value = rest.partition("=")
            args[key] = value
        elif ins == "FROM":
            m = re.fullmatch(r"(\S+) AS (\S+)", rest, re.I)
            assert m, f"every stage is named: FROM {rest}"
            stage = Stage(m.group(2), re.sub(r"\$\{(\w+)\}", lambda v: args.get(v.group(1), v.group(0)), m.group(1)))
            stages[stage.name] = stage
        else:
            assert stage is not None, line
            stage.steps.append((ins, rest))
    return args, stages


ARGS, STAGES = parse(DOCKERFILE.read_text())


def test_base_is_pinned_by_tag_and_digest_and_targets_run_non_root() -> None:
    bases = {s.base for s in STAGES.values() if s.base not in STAGES}
    assert bases == {ARGS["PYTHON_IMAGE"]}
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}", ARGS["PYTHON_IMAGE"]), ARGS
    used = {s.base for s in STAGES.values()} | {m for s in STAGES.values() for _, args in s.steps
                                                for m in re.findall(r"from=(\w+)", args)}
    final = [name for name in STAGES if name not in used]
    assert final == ["sim", "operator"] and list(STAGES)[-1] == "operator"  # the operator is the default target
    for name in final:
        assert STAGES[name].all("USER") == [f"{UID}:{UID}"], name
    assert STAGES["operator"].all("ENTRYPOINT") == ['["sglang-operator", "run"]']
    assert STAGES["sim"].all("ENTRYPOINT") == ['["sglang-sim"]']
    # build tools stay in the build stage: only the build stage copies sources; the runtime mounts the wheels
    assert [n for n, s in STAGES.items() if s.all("COPY")] == ["build"]
    for name, dist in (("runtime", "sglang-operator"), ("sim-runtime", "sglang-sim")):
        runtime = " ".join(STAGES[name].all("RUN"))
        assert "--mount=type=bind,from=build,source=/wheels,target=/wheels" in runtime
        assert runtime.split("--find-links /wheels ")[1].split()[0] == dist, name  # one distribution each
        assert "python -m pip uninstall --yes --no-cache-dir pip setuptools wheel" in runtime
        assert f"useradd --uid {UID} " in runtime
    assert STAGES["operator"].base == "runtime" and STAGES["sim"].base == "sim-runtime"


class Replay:
    """Runs a stage's steps on this machine, with the image's absolute paths moved under ``root``."""

    MOVED = ("/wheels", "/opt/venv", "/src")
    SKIPPED = ("python -m pip uninstall ", "useradd ")  # would change this machine; checked above instead

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cwd = root
        self.env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                    "HOME": str(root), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}

    def move(self, text: str) -> str:
        for path in self.MOVED:
            text = re.sub(rf"(?<![\w/.]){re.escape(path)}(?=[/\s\"']|$)", str(self.root) + path, text)
        return text

    def copy(self, args: str) -> None:
        *sources, dest = shlex.split(args)
        patterns = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines()
                    if p.strip() and not p.startswith("#")]
        kept = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
        assert patterns[0] == "*" and set(sources) <= kept, f"the build context must hold {sources}"
        nested = [p.removeprefix("**/") for p in patterns if p.startswith("**/")]

        def ignore(_dir: str, names: list[str]) -> list[str]:
            return [n for n in names if any(fnmatch(n, p) for p in nested)]

        target = self.cwd / dest
        for src in sources:
            path = ROOT / src
            if path.is_dir():
                shutil.copytree(path, target if not dest.endswith("/") else target / path.name, ignore=ignore)
            else:
                target.mkdir(parents=True, exist_ok=True) if dest.endswith("/") else None
                shutil.copy(path, target / path.name if dest.endswith("/") else target)

    def run(self, stage: Stage) -> None:
        for ins, args in stage.steps:
            if ins == "WORKDIR":
                self.cwd = Path(self.move(args))
                self.cwd.mkdir(parents=True, exist_ok=True)
            elif ins == "COPY":
                self.copy(args)
            elif ins == "ENV":
                for key, value in re.findall(r"(\w+)=(\S+)", args):
                    self.env[key] = self.move(value).replace("$PATH", self.env["PATH"])
            elif ins == "RUN":
                steps = re.sub(r"--mount=\S+\s+", "", args).split(" && ")
                command = " && ".join(self.move(s) for s in steps if not s.startswith(self.SKIPPED))
                proc = subprocess.run(["sh", "-euc", command], cwd=self.cwd, env=self.env,
                                      capture_output=True, text=True, timeout=900)
                assert proc.returncode == 0, f"{command}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


@pytest.fixture(scope="module")
def built() -> Iterator[Path]:
    """The build stage replayed once: its /wheels, shared by both runtimes."""
    root = Path(tempfile.mkdtemp(prefix="sglang-image-build-", dir="/tmp"))
    try:
        Replay(root).run(STAGES["build"])
        yield root / "wheels"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _replay(wheels: Path, stages: tuple[str, ...]) -> Iterator[Replay]:
    root = Path(tempfile.mkdtemp(prefix="sglang-image-", dir="/tmp"))
    try:
        (root / "wheels").symlink_to(wheels)
        replay = Replay(root)
        for name in stages:
            replay.run(STAGES[name])
        yield replay
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def image(built: Path) -> Iterator[Replay]:
    """The operator image's environment (`operator` adds only USER, EXPOSE, ENTRYPOINT to `runtime`)."""
    yield from _replay(built, ("runtime",))


@pytest.fixture(scope="module")
def sim_image(built: Path) -> Iterator[Replay]:
    """The simulator image's environment."""
    yield from _replay(built, ("sim-runtime", "sim"))


def _read_only(path: Path) -> None:
    """Everyone may read (and enter, and run what is executable); nobody may write."""
    for p in [path, *path.rglob("*")]:
        if not p.is_symlink():
            p.chmod(0o555 if p.is_dir() or p.stat().st_mode & stat.S_IXUSR else 0o444)


def _dists(image: Replay) -> set[str]:
    site = next((image.root / "opt" / "venv").glob("lib/python3*/site-packages"))
    return {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}


def test_the_environment_holds_no_build_tools(image: Replay, sim_image: Replay) -> None:
    for replay in (image, sim_image):
        venv = replay.root / "opt" / "venv"
        assert "sglang_operator" in _dists(replay)
        assert not _dists(replay) & {"pip", "setuptools", "wheel"}, _dists(replay)
        assert not (venv / "bin" / "pip").exists()
        assert not (venv / "src").exists()


def test_the_operator_image_holds_no_simulator_and_no_build_time_tools(image: Replay, built: Path) -> None:
    """The operator's install step brings its own distribution only: no ``sglang-sim`` entry point, no simulator
    or extractor module in its wheel (the issue's ``unzip -l``) nor in the environment."""
    assert (image.root / "opt" / "venv" / "bin" / "sglang-operator").exists()
    assert not (image.root / "opt" / "venv" / "bin" / "sglang-sim").exists()
    assert not _dists(image) & {"sglang_sim", "sglang_operator_tools", "grafana_foundation_sdk", "matplotlib"}, \
        _dists(image)  # matplotlib: the optional extra `plot` (kubectl sglang tune plot), not the operator's
    wheel = next(built.glob("sglang_operator-*.whl"))
    with zipfile.ZipFile(wheel) as archive:  # what `unzip -l` lists
        modules = [n for n in archive.namelist() if n.endswith(".py")]
    assert any(m.startswith("sglang_operator/control/") for m in modules), modules
    assert not [m for m in modules if re.search(r"(^|/)(sim|extract|sglang_sim|sglang_operator_tools)/", m)
                or "monitoring/dashboard" in m or "monitoring/rules" in m], modules
    site = next((image.root / "opt" / "venv").glob("lib/python3*/site-packages"))
    assert not (site / "sglang_sim").exists() and not (site / "sglang_operator_tools").exists()


class ReadOnlyRun:
    """Runs the environment's commands from a read-only working directory, the environment itself read-only."""

    def __init__(self, image: Replay) -> None:
        self.venv = image.root / "opt" / "venv"
        self.work = image.root / "readonly-cwd"
        if not self.work.exists():
            self.work.mkdir()
            image.root.chmod(0o755)
            _read_only(self.venv)
            _read_only(self.work)
        self.env = {k: v for k, v in image.env.items() if k != "PYTHONPATH"} | {"HOME": str(self.work)}
        # root writes anywhere: without CAP_DAC_OVERRIDE / CAP_FOWNER (util-linux setpriv) it obeys the modes
        self.prefix = ["setpriv", "--bounding-set", "-dac_override,-fowner", "--"] if os.getuid() == 0 else []
        probe = subprocess.run([*self.prefix, "sh", "-c", "touch probe"], cwd=self.work, capture_output=True)
        assert probe.returncode != 0, "the working directory must be read-only for the entry points"

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.prefix, str(self.venv / "bin" / argv[0]), *argv[1:]], cwd=self.work,
                              env=self.env, capture_output=True, text=True, timeout=120)


def entrypoint(target: str) -> list[str]:
    return shlex.split(STAGES[target].all("ENTRYPOINT")[0].strip("[]").replace(",", " "))


def test_operator_entry_point_answers_help_from_a_read_only_directory(image: Replay) -> None:
    run = ReadOnlyRun(image)
    operator = run([*entrypoint("operator"), "--help"])
    assert operator.returncode == 0, operator.stderr
    assert "--leader-elect" in operator.stdout and "Run the operator" in operator.stdout
    assert list(run.work.iterdir()) == []  # nothing was written where it ran


def test_simulator_entry_points_answer_help_from_a_read_only_directory(sim_image: Replay) -> None:
    run = ReadOnlyRun(sim_image)
    runs = {" ".join(argv): run(argv) for argv in (
        [*entrypoint("sim"), "--help"], ["python3", "-m", "sglang.launch_server", "--help"],
        ["sglang", "serve", "--help"])}
    for argv, sim in runs.items():  # each way in reaches the simulator's SGLang parser
        assert "--model-path" in sim.stdout and "--speculative-algorithm" in sim.stdout, (argv, sim.stderr)
    assert list(run.work.iterdir()) == []
    assert {argv: sim.returncode for argv, sim in runs.items()} == dict.fromkeys(runs, 0)
