#!/usr/bin/env bash
# Set up a virtualenv with FracHub and its test dependencies, then run the whole
# test suite. Safe to re-run: the venv is reused and only missing packages install.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh test
source scripts/torch.sh
source scripts/proxy.sh
source scripts/browser.sh
source scripts/postgres.sh
"$VENV/bin/ruff" check .
"$VENV/bin/python" -m pytest "$@"
