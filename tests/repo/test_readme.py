"""The README for the first five minutes: under 10 KB, and every command it shows exists.

Commands are taken from its ``bash``/``console`` blocks (``$ `` prompts, ``\\`` continuations, ``&&`` chains and
trailing comments handled) and from inline code in its prose. ``kubectl sglang …`` and ``sglang-operator …``:
the verb path exists, its ``--help`` exits 0 and every option shown is one of its options. ``python -m MODULE``: the
module exists, ``--help`` exits 0 and names every option shown. ``bash FILE`` / ``./FILE``: the file exists (and
``./FILE`` is executable). Every repository path a command names (``samples/…``, ``charts/…``) exists, and every
relative link of the README and of the pages the reference moved to points at a file and, with ``#anchor``, at a
heading of it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from sglang_operator.entry.cli import app as cli_app
from sglang_operator.plugin.commands import app as plugin_app

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PREFIXES = ("kubectl sglang ", "sglang-operator ", "python -m ", "bash ", "./")
MOVED_TO = ["README.md", "docs/README-map.md", "docs/configuration.md", "docs/install.md", "docs/commands.md",
            "docs/bounds-and-sizing.md", "docs/development.md", "docs/monitoring.md", "CHANGELOG.md",
            "docs/local-cluster.md", "docs/troubleshooting.md"]


def shown_commands(text: str) -> list[str]:
    """Every command of ``text`` that starts with one of :data:`PREFIXES`, as written (arguments included)."""
    found: list[str] = []
    for block in re.findall(r"```(?:bash|console|sh)\n(.*?)```", text, re.S):
        for line in re.sub(r"\s*\\\n\s*", " ", block).splitlines():
            line = re.sub(r"\s+#.*$", "", line.strip().removeprefix("$ "))
            found += [part for part in re.split(r"\s*(?:&&|\|\||;|\||>)\s*", line) if part.startswith(PREFIXES)]
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    found += [span for span in re.findall(r"`([^`\n]+)`", prose) if span.startswith(PREFIXES)]
    return found


def test_the_readme_is_under_10_kb_and_shows_the_two_commands_first() -> None:
    text = README.read_text()
    assert len(text.encode()) < 10 * 1024
    commands = shown_commands(text)
    assert commands[:2] == ["./demo", "bash .ci/run"], commands


def test_the_extraction_finds_every_kind_of_command() -> None:
    text = ("```console\n$ kubectl sglang history x -o json  # note\n$ sglang-operator render \\\n  f.yaml > out\n"
            "python -m e2e.demo && bash .ci/run\n```\nthen `./demo --keep`, `kubectl get sgls`")
    assert shown_commands(text) == ["kubectl sglang history x -o json", "sglang-operator render f.yaml",
                                    "python -m e2e.demo", "bash .ci/run", "./demo --keep"]
    readme = shown_commands(README.read_text())
    for prefix in ("kubectl sglang ", "python -m ", "bash ", "./"):
        assert any(c.startswith(prefix) for c in readme), (prefix, readme)


@cache
def typer_root(plugin: bool) -> Any:
    return typer.main.get_command(plugin_app if plugin else cli_app)


def resolve(words: list[str], plugin: bool) -> tuple[list[str], Any]:
    """The longest verb path of ``words`` and its click command (typer's own click: a group has ``commands``)."""
    command, path = typer_root(plugin), []
    for word in words:
        if word not in getattr(command, "commands", {}):
            break
        command, path = command.commands[word], [*path, word]
    return path, command


def option_names(command: Any) -> set[str]:
    return {name for p in command.params for name in (*p.opts, *p.secondary_opts)} | {"--help"}


def options_shown(words: list[str]) -> list[str]:
    return [w.split("=", 1)[0] for w in words if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", w)]


def check_cli(command_line: str) -> None:
    words = shlex.split(command_line)
    plugin = words[0] == "kubectl"
    args = words[2:] if plugin else words[1:]
    path, command = resolve(args, plugin)
    if not path:
        assert args and args[0] == "--version", command_line  # the program's own options
        assert "--version" in option_names(typer_root(plugin)), command_line
        return
    result = CliRunner().invoke(plugin_app if plugin else cli_app, [*path, "--help"])
    assert result.exit_code == 0, (command_line, result.output)
    unknown = set(options_shown(args[len(path):])) - option_names(command)
    assert not unknown, f"{command_line}: no such option {sorted(unknown)}"


@cache
def module_help(module: str) -> str:
    out = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, (module, out.stderr)
    return out.stdout


def check_module(command_line: str) -> None:
    words = shlex.split(command_line)
    module = words[2]
    assert importlib.util.find_spec(module) is not None, command_line
    text = module_help(module)
    missing = [o for o in options_shown(words[3:]) if o not in text]
    assert not missing, f"{command_line}: {module} --help names no {missing}"


def check_file(command_line: str) -> None:
    words = shlex.split(command_line)
    path = ROOT / (words[1] if words[0] == "bash" else words[0])
    assert path.is_file(), command_line
    if words[0] != "bash":
        assert os.access(path, os.X_OK), f"{command_line}: not executable"


@pytest.mark.parametrize("command_line", sorted(set(shown_commands(README.read_text()))))
def test_every_command_the_readme_shows_exists(command_line: str) -> None:
    if command_line.startswith(("kubectl sglang ", "sglang-operator ")):
        check_cli(command_line)
    elif command_line.startswith("python -m "):
        check_module(command_line)
    else:
        check_file(command_line)


def test_every_cli_command_the_reference_shows_exists() -> None:
    for page in ("docs/commands.md", "docs/install.md", "docs/development.md", "docs/monitoring.md",
                 "docs/local-cluster.md", "docs/troubleshooting.md"):
        for command_line in shown_commands((ROOT / page).read_text()):
            if command_line.startswith(("kubectl sglang ", "sglang-operator ")):
                check_cli(command_line.replace("...", "").replace("[", "").replace("]", ""))


def test_every_path_a_readme_command_names_exists() -> None:
    text = README.read_text()
    paths = set(re.findall(r"(?<![\w/.-])((?:samples|charts|docs|deploy)/[\w./-]+\w)", text))
    assert paths
    assert not [p for p in sorted(paths) if not (ROOT / p).exists()]


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of ``page``: lower case, punctuation but ``-`` and ``_`` dropped, spaces → ``-``."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("page", MOVED_TO)
def test_every_relative_link_points_at_a_file_and_heading(page: str) -> None:
    source = ROOT / page
    text = re.sub(r"```.*?```", "", source.read_text(), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        path = (source.parent / file).resolve() if file else source
        if not path.exists() or (anchor and path.suffix == ".md" and anchor not in anchors(path)):
            broken.append(target)
    assert not broken, f"{page}: {broken}"
