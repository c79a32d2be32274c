# syntax=docker/dockerfile:1.7
# Images of sglang-operator, built with BuildKit (tests/repo/test_image.py runs these steps without Docker):
#   docker buildx build -t REGISTRY/sglang-operator:0.1.0 .               # the operator (default, last target)
#   docker buildx build --target sim -t REGISTRY/sglang-sim:0.1.0 .       # the SGLang simulator, for clusters
#                                                                          # without GPUs
# Base: python 3.11 on Debian 12, pinned by tag and by the digest of its multi-architecture index.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

# Build stage: the operator's wheel, the simulator's (its own distribution, ./sim) and a wheel of every dependency. Nothing of it reaches the final images but
# the wheels (no source tree, no pip cache, no build backend).
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
COPY sim ./sim
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels . ./sim

# Runtime: a virtual environment without pip, filled from the wheels only (no index): the operator's distribution
# alone (no simulator, no build-time tools); pip, setuptools and wheel are then removed from the base interpreter.
# Non-root user 65532 with a passwd entry (kopf's identity falls back to getpass.getuser() when POD_ID is unset); the
# chart mounts an emptyDir on /tmp and sets readOnlyRootFilesystem.
FROM ${PYTHON_IMAGE} AS runtime
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m venv --without-pip /opt/venv \
    && python -m pip --python /opt/venv/bin/python install --no-cache-dir --no-index --find-links /wheels sglang-operator \
    && python -m pip uninstall --yes --no-cache-dir pip setuptools wheel \
    && useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin sglang-operator
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

# The simulator's runtime: the same, with the sglang-sim distribution (which brings the operator's SGLang facts).
FROM ${PYTHON_IMAGE} AS sim-runtime
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m venv --without-pip /opt/venv \
    && python -m pip --python /opt/venv/bin/python install --no-cache-dir --no-index --find-links /wheels sglang-sim \
    && python -m pip uninstall --yes --no-cache-dir pip setuptools wheel \
    && useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin sglang-sim
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

# The simulator (sglang-sim) standing in for an lmsysorg/sglang image: the operator's pod commands
# `python3 -m sglang.launch_server ARGS` and `sglang serve ARGS` run it through two shims.
FROM sim-runtime AS sim
RUN site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    && mkdir "$site/sglang" \
    && printf '"""sglang-sim shim: python -m sglang.launch_server runs the simulator."""\n' > "$site/sglang/__init__.py" \
    && printf 'import sys\n\nfrom sglang_sim.__main__ import main\n\nsys.exit(main(["python3", "-m", "sglang.launch_server", *sys.argv[1:]]))\n' > "$site/sglang/launch_server.py" \
    && printf '#!/bin/sh\nexec sglang-sim sglang "$@"\n' > /opt/venv/bin/sglang \
    && chmod 0755 /opt/venv/bin/sglang
USER 65532:65532
EXPOSE 30000
ENTRYPOINT ["sglang-sim"]

FROM runtime AS operator
USER 65532:65532
EXPOSE 8080 9808
ENTRYPOINT ["sglang-operator", "run"]
