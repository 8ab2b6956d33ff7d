# One image, one command: `docker run -p 9092:9092 kbroker` serves a single node.
FROM python:3.11-slim

WORKDIR /opt/kbroker
COPY pyproject.toml setup.py README.md ./
COPY kbroker ./kbroker
RUN pip install --no-cache-dir . && useradd --system --home /var/lib/kbroker kbroker \
    && mkdir -p /var/lib/kbroker && chown kbroker /var/lib/kbroker

USER kbroker
VOLUME /var/lib/kbroker
EXPOSE 9092 9644
ENV KBROKER_LOG_DIRS=/var/lib/kbroker \
    KBROKER_LISTENERS=PLAINTEXT://0.0.0.0:9092 \
    KBROKER_ADVERTISED_LISTENERS=PLAINTEXT://localhost:9092 \
    KBROKER_HTTP_LISTENERS=http://0.0.0.0:9644
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9644/ready')"
ENTRYPOINT ["kbroker", "serve"]
