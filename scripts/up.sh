#!/usr/bin/env bash
# Set up a virtualenv with FracHub and run it on its embedded default.
# Until the hub integration lands this replays an example scenario through the
# real scheduling engine; pass another scenario file to try your own.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
exec "$VENV/bin/frachub" scenario run "${1:-tests/scenarios/02_notebook_gets_a_fraction_now.yaml}"
