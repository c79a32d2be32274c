# The operator image (used by charts/sglang-operator). Build: docker build -t sglang-operator .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir /wheels/*.whl
# non-root, read-only root filesystem friendly (the chart mounts /tmp); a passwd entry, because kopf's
# identity falls back to getpass.getuser() when POD_ID is unset
RUN useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin sglang-operator
USER 65532:65532
ENV PYTHONUNBUFFERED=1
ENTRYPOINT ["sglang-operator"]
CMD ["run"]
