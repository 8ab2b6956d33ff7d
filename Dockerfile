# One image, one command: `docker run -p 9092:9092 -p 9644:9644 kbroker` serves a single
# node; `docker run kbroker topics list --bootstrap HOST:9092` runs an admin command.
#
# Two stages: the first builds kbroker (with its C record walk and TLS record reader) and
# its dependencies into a virtualenv, so the compiler, pip's caches and the sources stay
# behind; the second copies only that virtualenv onto the slim base and runs as an
# unprivileged user.
#
# BASE_IMAGE is any Debian bookworm image with python (3.11 or later) and its venv module:
# the official slim image by default, or one made where no registry is reachable
# (scripts/docker-test-setup.sh imports a debootstrapped bookworm with Debian's python3).
ARG BASE_IMAGE=python:3.11.11-slim-bookworm
FROM ${BASE_IMAGE} AS build

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# Any gcc of the release builds the C extensions the same: versions are not pinned.
# libssl-dev is the OpenSSL this image's Python runs on, which the TLS reader must match.
# Debian's own python3 keeps Python.h in python3-dev; the official image has it.
# hadolint ignore=DL3008,SC2046
RUN apt-get update \
    && headers="$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
    && apt-get install -y --no-install-recommends gcc libc6-dev libssl-dev \
        $(test -f "$headers/Python.h" || echo python3-dev) \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
RUN python -m venv /opt/kbroker
# pip reads its index from these when given (a mirror, or wheels served on the build host:
# PIP_NO_INDEX=1 PIP_FIND_LINKS=http://127.0.0.1:8000/ with docker build --network host).
ARG PIP_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
COPY pyproject.toml setup.py README.md LICENSE ./
COPY kbroker ./kbroker
# pip compiles the bytecode at install: kept, since the unprivileged user cannot write it.
RUN /opt/kbroker/bin/pip install --no-cache-dir . \
    && /opt/kbroker/bin/python -I -c "import kbroker.protocol._recordwalk, kbroker.protocol._requestread, kbroker.protocol._responsewrite" \
    && /opt/kbroker/bin/python -I -c "from kbroker.security import tls_session as t; assert t._tlsread"

FROM ${BASE_IMAGE}

RUN groupadd --system --gid 10001 kbroker \
    && useradd --system --uid 10001 --gid kbroker --home-dir /var/lib/kbroker kbroker \
    && mkdir -p /var/lib/kbroker \
    && chown kbroker:kbroker /var/lib/kbroker
COPY --from=build /opt/kbroker /opt/kbroker

ENV PATH=/opt/kbroker/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    KBROKER_LOG_DIRS=/var/lib/kbroker \
    KBROKER_LISTENERS=PLAINTEXT://0.0.0.0:9092 \
    KBROKER_ADVERTISED_LISTENERS=PLAINTEXT://localhost:9092 \
    KBROKER_HTTP_LISTENERS=http://0.0.0.0:9644
USER 10001:10001
WORKDIR /var/lib/kbroker
VOLUME ["/var/lib/kbroker"]
EXPOSE 9092 9644
# /ready on the port of the first HTTP listener KBROKER_HTTP_LISTENERS names, so a node
# given another port (a compose file, a pod) needs no health check of its own.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; port = os.environ['KBROKER_HTTP_LISTENERS'].split(',')[0].strip().rstrip('/').rsplit(':', 1)[1]; urllib.request.urlopen(f'http://127.0.0.1:{port}/ready', timeout=2)"]
ENTRYPOINT ["kbroker"]
CMD ["serve"]
