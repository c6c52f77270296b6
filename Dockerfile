# syntax=docker/dockerfile:1
# headroom: `headroom serve` (extender), `headroom agent` (node agent), `headroom ledger`.
#
#   docker build -t headroom:0.1.0 .
#
# Stage `build` makes wheels for headroom (compiling its scoring kernel) and every
# dependency; the final stage installs them into a virtual environment from those wheels
# only (--no-index): no compiler, no pip download, no wheels left in a layer. tests/test_dockerfile.py replays these RUN and
# COPY steps in a temporary directory and runs the installed entry point.

# python:3.11-slim-bookworm (3.11.16), OCI image index digest (multi-arch).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b
# The build stage compiles extender/scoring/kernel.c (the scoring pass, pyproject.toml's
# ext-modules), so it starts from the full image, which has gcc and the Python headers;
# the same Python (3.11.16 on Debian bookworm) as the final stage, so the wheel fits it.
ARG BUILD_IMAGE=python:3.11-bookworm@sha256:b99029c95d3d37fb1e4e76d287f7984373dca77c665885986e31b2c95260c13c

FROM ${BUILD_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY extender/ extender/
COPY drivers/ drivers/
RUN --mount=type=cache,target=/root/.cache/pip \
    python -m pip wheel --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="headroom" \
      org.opencontainers.image.description="Kubernetes GPU scheduler extender, NVML node agent and allocation ledger" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11-slim-bookworm"
# The venv has no pip of its own; the base image's pip installs into it, from the wheels
# of the build stage only, mounted for this step and never copied into a layer.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m venv --without-pip /opt/headroom \
 && python -m pip --python /opt/headroom/bin/python install \
      --no-cache-dir --no-index --find-links /wheels --only-binary :all: headroom
ENV PATH=/opt/headroom/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib
# 65532: the conventional "nonroot" uid/gid; numeric, so Kubernetes' runAsNonRoot can
# check it without a passwd entry.
USER 65532:65532
WORKDIR /tmp
EXPOSE 8888 8443 9400
ENTRYPOINT ["headroom"]
CMD ["serve", "--host", "0.0.0.0"]
