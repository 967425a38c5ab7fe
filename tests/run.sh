#!/usr/bin/env bash
# The whole test suite, from a fresh clone on a fresh machine: installs what it needs, then runs
# ruff, mypy --strict on the whole package, and pytest (unit, property, trec_eval agreement, integration).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "== creating .venv" >&2
    "$PY" -m venv .venv
fi
echo "== installing Python packages" >&2
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'

echo "== installing Label Studio in .venv-ls if missing (its own virtualenv: pinned dependencies)" >&2
.venv/bin/monitor services install --only label-studio

if [ -x deploy/local/install.sh ]; then
    echo "== installing the real services (Kafka jars, redis-server, prometheus, alertmanager)" >&2
    deploy/local/install.sh
fi

echo "== ruff" >&2
.venv/bin/ruff check monitor tests benchmarks
echo "== mypy --strict (monitor/)" >&2
.venv/bin/mypy
echo "== pytest" >&2
.venv/bin/python -m pytest "$@"
