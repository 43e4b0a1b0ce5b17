# Sourced by the other scripts: make sure the project's virtualenv exists and holds FracHub
# with the extras named in $1 (for example "test"), installed from the package index.
VENV=${FRACHUB_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e ".${1:+[$1]}"
