# Sourced by scripts/test.sh (after proxy.sh): make sure Debian's chromium is installed for
# the browser tests (tests/browser/) and export FRACHUB_CHROMIUM, the binary Playwright
# launches. Installs only when /usr/bin/chromium is missing (as root, or through sudo); a
# second run costs a file test. Playwright's own browser download (`playwright install`)
# is never used: CI and closed networks cannot fetch it, while Debian's package installs
# like any other.
#
#   FRACHUB_CHROMIUM  the browser binary to use (default /usr/bin/chromium)
FRACHUB_CHROMIUM=${FRACHUB_CHROMIUM:-/usr/bin/chromium}
export FRACHUB_CHROMIUM

if [ ! -x "$FRACHUB_CHROMIUM" ] && [ "$FRACHUB_CHROMIUM" = /usr/bin/chromium ]; then
    if [ "$(id -u)" = 0 ]; then
        _frachub_as_root=""
    elif command -v sudo >/dev/null 2>&1; then
        _frachub_as_root="sudo -n"
    else
        echo "browser.sh: chromium is missing and installing it needs root or sudo:" \
            "apt-get install -y --no-install-recommends chromium" >&2
        return 1 2>/dev/null || exit 1
    fi
    echo "browser.sh: installing Debian's chromium for the browser tests" >&2
    # an apt list older than the archive makes the install fail with 404s: refresh once
    $_frachub_as_root apt-get update -qq >&2 || true
    DEBIAN_FRONTEND=noninteractive $_frachub_as_root apt-get install -y -qq \
        --no-install-recommends chromium >&2
    unset _frachub_as_root
    if [ ! -x "$FRACHUB_CHROMIUM" ]; then
        echo "browser.sh: apt-get finished but $FRACHUB_CHROMIUM is not there" >&2
        return 1 2>/dev/null || exit 1
    fi
fi
