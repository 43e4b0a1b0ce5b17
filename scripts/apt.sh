# Sourced by scripts/browser.sh and scripts/postgres.sh: one way to install a Debian package
# a test needs, as root or through sudo (non-interactive, no recommends).
#
#   frachub_apt_install CALLER PACKAGE WHY
#       CALLER names the script in messages; WHY ends "installing Debian's PACKAGE for WHY".
#       Returns 1 with a message saying what to run when neither root nor sudo is there.
frachub_apt_install() {
    local caller=$1 package=$2 why=$3 as_root
    if [ "$(id -u)" = 0 ]; then
        as_root=""
    elif command -v sudo >/dev/null 2>&1; then
        as_root="sudo -n"
    else
        echo "$caller: $package is missing and installing it needs root or sudo:" \
            "apt-get install -y --no-install-recommends $package" >&2
        return 1
    fi
    echo "$caller: installing Debian's $package for $why" >&2
    # an apt list older than the archive makes the install fail with 404s: refresh once
    $as_root apt-get update -qq >&2 || true
    DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -qq \
        --no-install-recommends "$package" >&2
}
