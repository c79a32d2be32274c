"""The release workflow (``.github/workflows/ci.yml``; actionlint checks it in ``.ci/run``): ``bash .ci/run`` on every
push, and on a tag ``v*`` only, after it, the image pushed to the repository the chart names, its digest recorded,
and the chart pushed as an OCI artifact on the same registry."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def workflow() -> dict[Any, Any]:
    doc: dict[Any, Any] = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())
    return doc


def steps(job: dict[str, Any]) -> str:
    return yaml.safe_dump(job["steps"])


def test_every_push_runs_the_ci_script() -> None:
    wf = workflow()
    on = wf[True]  # YAML 1.1 reads the key `on` as true
    assert on["push"]["branches"] == ["**"] and on["push"]["tags"] == ["v*"]
    assert any(s.get("run") == "bash .ci/run" for s in wf["jobs"]["test"]["steps"])


def test_a_tag_pushes_the_image_the_chart_names_and_the_chart_beside_it() -> None:
    wf = workflow()
    values = yaml.safe_load((ROOT / "charts/sglang-operator/values.yaml").read_text())
    repository = values["image"]["repository"]
    assert wf["env"]["IMAGE"] == repository == "ghcr.io/sglang-operator/sglang-operator"
    assert wf["env"]["CHARTS"] == f"oci://{repository.rsplit('/', 1)[0]}/charts"
    release = wf["jobs"]["release"]
    assert release["if"] == "startsWith(github.ref, 'refs/tags/v')" and release["needs"] == "test"
    assert release["permissions"] == {"contents": "read", "packages": "write"}
    build = next(s for s in release["steps"] if s.get("uses", "").startswith("docker/build-push-action@"))
    assert build["with"]["push"] is True
    assert build["with"]["tags"] == "${{ env.IMAGE }}:${{ steps.version.outputs.version }}"
    text = steps(release)
    assert "${{ steps.image.outputs.digest }}" in text and "image-digest.txt" in text  # the digest recorded
    assert 'helm push "dist/sglang-operator-$VERSION.tgz" "$CHARTS"' in text
    assert "charts/sglang-operator/Chart.yaml" in text  # the tag must be the chart's version


def test_the_tag_check_accepts_the_charts_version_only(tmp_path: Path) -> None:
    script = next(s for s in workflow()["jobs"]["release"]["steps"] if s.get("id") == "version")["run"]
    version = yaml.safe_load((ROOT / "charts/sglang-operator/Chart.yaml").read_text())["version"]
    for tag, ok in ((f"v{version}", True), ("v9.9.9", False)):
        out_file = tmp_path / f"out-{tag}"
        out = subprocess.run(["bash", "-e", "-c", script], cwd=ROOT, capture_output=True, text=True,
                             env={"PATH": "/usr/bin:/bin", "GITHUB_REF_NAME": tag, "GITHUB_OUTPUT": str(out_file)})
        assert (out.returncode == 0) is ok, out
        if ok:
            assert out_file.read_text() == f"version={version}\n"
        else:
            assert f"::error::tag {tag} does not match Chart.yaml" in out.stdout
