"""Regenerate ``operator/sglang_operator/api/data/k8s-pod-types-v1.36.json`` from the installed
``kubernetes-validate`` package (a dev dependency); then regenerate the CRD (``sglang-operator crd``)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from sglang_operator.api import kube_types


def main() -> None:
    target = Path(str(resources.files("sglang_operator.api") / "data" / kube_types.DATA_FILE))
    target.write_text(kube_types.data_json(kube_types.extract_installed()), encoding="utf-8")
    print(target)


if __name__ == "__main__":
    main()
