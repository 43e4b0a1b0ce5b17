#!/usr/bin/env bash
# Set up a virtualenv with FracHub and its test dependencies, then run the whole
# test suite. Safe to re-run: the venv is reused and only missing packages install.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${FRACHUB_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e '.[test]'
"$VENV/bin/ruff" check .
"$VENV/bin/python" -m pytest "$@"
