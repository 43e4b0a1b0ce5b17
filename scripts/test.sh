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
# tests/unit on the base install alone: a second, small virtualenv, made afresh each run,
# holding FracHub with pyproject.toml's dependencies and no extra (plus pytest and
# hypothesis), so a unit test that needs the service's or the hub's packages fails here
# (they belong in tests/extras). pip's cache makes this a few seconds.
BASE_VENV=${FRACHUB_BASE_VENV:-.venv-base}
python3 -m venv --clear "$BASE_VENV"
"$BASE_VENV/bin/python" -m pip install --quiet -e . "pytest>=8" "hypothesis>=6.100"
"$BASE_VENV/bin/python" -m pytest -q -p no:cacheprovider tests/unit
"$VENV/bin/python" -m pytest "$@"
