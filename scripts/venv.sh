# Sourced by the other scripts: make sure the project's virtualenv exists and holds FracHub
# (editable, from this checkout) with the extras named in $1, and their dependencies from the
# package index: "hub" for `frachub up` (scripts/up.sh), "test" for everything the tests need
# (scripts/test.sh). The extras are listed in pyproject.toml and the README.
VENV=${FRACHUB_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e ".${1:+[$1]}"
