# The paigraph server. BASE_IMAGE is any Debian-like image with Python 3.11 or newer: the
# official slim image by default, or the local one scripts/build-base-image makes where no
# registry can be reached. When build/wheels holds wheels (deploy/compose/build-wheels), the
# dependencies are installed from them without network.
#
#   docker build -t paigraph/server:local .
#   docker build --build-arg BASE_IMAGE=paigraph/debian-base:local -t paigraph/server:local .
#
# The web UI is built on the host first (./scripts/build-web, which ./scripts/serve and
# ./scripts/test run too): nothing can be downloaded during `docker build`, so the image copies
# the build in server/webui/ with the package, and the build stops when it is missing.
#
# The simulator backend drives the host's Docker engine: mount /var/run/docker.sock, use the
# host's network, and mount the state directory at the same path as on the host (see
# docker-compose.yml for why).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    LANG=C.UTF-8 \
    PATH=/opt/paigraph/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# git clones the `script` prerequisites of jobs (the local Debian base has it already)
RUN if ! command -v git >/dev/null; then \
        apt-get update \
        && apt-get install -y --no-install-recommends git ca-certificates \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -m venv /opt/paigraph

# The dependencies get a layer of their own, so changing the code does not reinstall them.
# `build/wheel[s]` matches nothing when there are no local wheels; pyproject.toml always does.
COPY pyproject.toml build/wheel[s] /tmp/deps/
RUN cd /tmp/deps \
    && python3 -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb")); print("\n".join(p["build-system"]["requires"] + p["project"]["dependencies"]))' >requirements.txt \
    && if ls ./*.whl >/dev/null 2>&1; then \
        pip install --no-index --find-links . -r requirements.txt \
        || { echo "the wheels in build/wheels do not cover pyproject.toml: run deploy/compose/build-wheels" >&2; exit 1; }; \
    else \
        pip install -r requirements.txt; \
    fi \
    && rm -rf /tmp/deps

COPY pyproject.toml README.md /src/
COPY server /src/server
COPY backends /src/backends
COPY simulator /src/simulator
RUN if [ ! -f /src/server/webui/index.html ]; then \
        echo "server/webui/ (the built web UI) is missing: run ./scripts/build-web first" >&2; \
        exit 1; \
    fi \
    && pip install --no-deps --no-build-isolation /src && rm -rf /src

# the default SQLite file and the simulator's state live under /var/lib/paigraph
ENV XDG_DATA_HOME=/var/lib \
    PAIGRAPH_HOST=0.0.0.0 \
    PAIGRAPH_PORT=8000
WORKDIR /var/lib/paigraph
EXPOSE 8000
HEALTHCHECK --interval=5s --timeout=5s --start-period=30s --retries=5 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PAIGRAPH_PORT', '8000'), timeout=4)"]
CMD ["paigraph", "serve"]
