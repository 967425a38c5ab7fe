# syntax=docker/dockerfile:1
# The search relevance monitor's worker image: `monitor worker` (faust-streaming) with its HTTP server
# (/metrics, /healthz, /readyz, POST /deploys) on port 9464. Also runs `monitor produce` (the traffic
# generator of docker-compose.yml's "traffic" profile) and the other `monitor` sub-commands, except the two
# that need an extra the worker leaves out: `monitor evaluate QRELS RUN` ([offline], pyarrow) and
# `monitor report` ([report], matplotlib). Both exit 2 naming it.
#
#   docker build -t search-relevance-monitor .
#   docker run --rm -p 9464:9464 -e MONITOR_KAFKA_BOOTSTRAP=... -e MONITOR_REDIS_URL=... search-relevance-monitor
#
# Every worker dependency ships a manylinux wheel for CPython 3.11, so the slim image needs no compiler.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY monitor ./monitor
RUN pip wheel --wheel-dir /wheels ".[worker]"

FROM python:3.11-slim
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels "search-relevance-monitor[worker]" \
    && groupadd --system --gid 10001 monitor \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/monitor --create-home \
       --shell /usr/sbin/nologin monitor
USER 10001:10001
WORKDIR /home/monitor

# Containers listen on every interface (the worker's own default is 127.0.0.1); Faust's data directory
# defaults to /tmp/search-relevance-monitor/<app id>, which a read-only root file system must mount.
ENV MONITOR_HTTP_HOST=0.0.0.0 \
    MONITOR_HTTP_PORT=9464
EXPOSE 9464

# Liveness: the process answers /healthz (readiness, /readyz, also needs Redis and the consumer group).
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('MONITOR_HTTP_PORT', '9464'), timeout=2)"]

CMD ["monitor", "worker"]
