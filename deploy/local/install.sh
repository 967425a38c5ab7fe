#!/usr/bin/env bash
# Puts on this machine what the real local services need (see deploy/local/README.md):
#   - Debian packages redis-server, prometheus (with promtool) and prometheus-alertmanager (with amtool),
#     and maven / a Java runtime if those are missing. `apt-get update` and `apt-get install -y
#     --no-install-recommends` run only when one of the binaries is missing, non-interactively, with a
#     temporary policy-rc.d so the packages do not start system services on the default ports;
#   - the Kafka jars, resolved from Maven Central with mvn (deploy/local/kafka/pom.xml) into
#     ~/.cache/search-relevance-monitor/kafka-<version>/libs, or $MONITOR_SERVICES_CACHE.
# Idempotent; well under a second when everything is present. The work is done by
# `monitor services install` (monitor/services/install.py), the same code `monitor services up` and the
# test fixtures use, so the three never disagree about what "installed" means.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ -x .venv/bin/python ]; then
    PY=.venv/bin/python
else
    PY=${PYTHON:-python3}
fi
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m monitor services install
