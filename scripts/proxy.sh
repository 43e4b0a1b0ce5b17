# Sourced by scripts/test.sh: make sure JupyterHub's configurable-http-proxy (an npm package)
# is installed in a repo-local prefix and put its bin/ first on PATH, so the service tests can
# start a real JupyterHub. Installs only when missing; a second run costs a file test.
#
#   FRACHUB_NPM_PREFIX  where to install (default: <repo>/.cache/npm, not tracked by git)
#   FRACHUB_CHP_VERSION npm version spec to install (default below)
FRACHUB_CHP_VERSION=${FRACHUB_CHP_VERSION:-5.3.0}
FRACHUB_NPM_PREFIX=${FRACHUB_NPM_PREFIX:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.cache/npm"}
export FRACHUB_NPM_PREFIX

_frachub_chp_bin="$FRACHUB_NPM_PREFIX/node_modules/.bin/configurable-http-proxy"
# The stamp is written only after npm finished, so an interrupted install is redone.
_frachub_chp_stamp="$FRACHUB_NPM_PREFIX/.installed-configurable-http-proxy-$FRACHUB_CHP_VERSION"
if [ ! -x "$_frachub_chp_bin" ] || [ ! -f "$_frachub_chp_stamp" ]; then
    if ! command -v npm >/dev/null 2>&1; then
        echo "proxy.sh: npm is needed to install configurable-http-proxy (apt-get install npm)" >&2
        return 1 2>/dev/null || exit 1
    fi
    echo "proxy.sh: installing configurable-http-proxy@$FRACHUB_CHP_VERSION into $FRACHUB_NPM_PREFIX" >&2
    mkdir -p "$FRACHUB_NPM_PREFIX"
    rm -f "$FRACHUB_NPM_PREFIX"/.installed-configurable-http-proxy-*
    npm install --prefix "$FRACHUB_NPM_PREFIX" --no-save --no-audit --no-fund \
        --omit=dev --loglevel=error "configurable-http-proxy@$FRACHUB_CHP_VERSION" >&2
    "$_frachub_chp_bin" --version >/dev/null
    touch "$_frachub_chp_stamp"
fi
case ":$PATH:" in
    *":$FRACHUB_NPM_PREFIX/node_modules/.bin:"*) ;;
    *) export PATH="$FRACHUB_NPM_PREFIX/node_modules/.bin:$PATH" ;;
esac
unset _frachub_chp_bin _frachub_chp_stamp
