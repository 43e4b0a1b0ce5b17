# Sourced by scripts/test.sh: make sure Debian's PostgreSQL server binaries are installed for
# the store and service tests on PostgreSQL (tests/postgres.py starts a throwaway cluster
# with initdb and pg_ctl in a temporary directory, as an unprivileged user). Installs only
# when no initdb is found (as root, or through sudo); nothing is started here and no
# system cluster is used.
#
#   FRACHUB_PG_BIN              the directory of initdb and pg_ctl (exported when found)
#   FRACHUB_REQUIRE_POSTGRES=1  exported too: the PostgreSQL tests then fail instead of skip
_frachub_pg_bin() {
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && { echo "$dir"; return 0; }
    done
    return 1
}

if [ -z "${FRACHUB_PG_BIN:-}" ] && ! FRACHUB_PG_BIN=$(_frachub_pg_bin); then
    if [ "$(id -u)" = 0 ]; then
        _frachub_as_root=""
    elif command -v sudo >/dev/null 2>&1; then
        _frachub_as_root="sudo -n"
    else
        echo "postgres.sh: PostgreSQL is missing and installing it needs root or sudo:" \
            "apt-get install -y --no-install-recommends postgresql" >&2
        return 1 2>/dev/null || exit 1
    fi
    echo "postgres.sh: installing Debian's postgresql for the PostgreSQL tests" >&2
    $_frachub_as_root apt-get update -qq >&2 || true
    # the package's own cluster is not wanted: tests run their own in a temporary directory
    DEBIAN_FRONTEND=noninteractive $_frachub_as_root apt-get install -y -qq \
        --no-install-recommends postgresql >&2
    unset _frachub_as_root
    if ! FRACHUB_PG_BIN=$(_frachub_pg_bin); then
        echo "postgres.sh: apt-get finished but no /usr/lib/postgresql/*/bin/initdb" >&2
        return 1 2>/dev/null || exit 1
    fi
fi
unset -f _frachub_pg_bin
FRACHUB_REQUIRE_POSTGRES=1
export FRACHUB_PG_BIN FRACHUB_REQUIRE_POSTGRES
