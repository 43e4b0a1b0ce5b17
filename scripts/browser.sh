# Sourced by scripts/test.sh (after proxy.sh): make sure Debian's chromium is installed for
# the browser tests (tests/browser/) and export FRACHUB_CHROMIUM, the binary Playwright
# launches. Installs only when /usr/bin/chromium is missing (as root, or through sudo); a
# second run costs a file test. Playwright's own browser download (`playwright install`)
# is never used: CI and closed networks cannot fetch it, while Debian's package installs
# like any other.
#
#   FRACHUB_CHROMIUM  the browser binary to use (default /usr/bin/chromium)
source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

FRACHUB_CHROMIUM=${FRACHUB_CHROMIUM:-/usr/bin/chromium}
export FRACHUB_CHROMIUM

if [ ! -x "$FRACHUB_CHROMIUM" ] && [ "$FRACHUB_CHROMIUM" = /usr/bin/chromium ]; then
    frachub_apt_install browser.sh chromium "the browser tests" || {
        return 1 2>/dev/null || exit 1
    }
    if [ ! -x "$FRACHUB_CHROMIUM" ]; then
        echo "browser.sh: apt-get finished but $FRACHUB_CHROMIUM is not there" >&2
        return 1 2>/dev/null || exit 1
    fi
fi
