#!/usr/bin/env bash
# Set up FracHub (a virtualenv with its dependencies, JupyterHub's configurable-http-proxy
# from npm) and run it on its embedded default: JupyterHub with the FracHub spawner, the
# scheduler service, SQLite, and GPUs from NVML or a declared inventory. Arguments go to
# `frachub up` (`--demo` adds demo users and projects; `--help` lists the rest, without
# installing anything).
set -euo pipefail
cd "$(dirname "$0")/.."
for arg in "$@"; do
    case "$arg" in
        -h|--help) exec python3 -m hub_ext.cli.up --help ;;
        --) break ;;
    esac
done
source scripts/venv.sh hub  # the one-machine extra (not this script's own arguments)
source scripts/proxy.sh
exec "$VENV/bin/frachub" up "$@"
