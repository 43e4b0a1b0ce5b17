# Sourced by scripts/test.sh: make sure Debian's PostgreSQL server binaries are installed for
# the store and service tests on PostgreSQL (tests/postgres.py starts a throwaway cluster
# with initdb and pg_ctl in a temporary directory, as an unprivileged user). Installs only
# when no initdb is found (as root, or through sudo); nothing is started here and no
# system cluster is used.
#
#   FRACHUB_PG_BIN              the directory of initdb and pg_ctl (exported when found)
#   FRACHUB_REQUIRE_POSTGRES=1  exported too: the PostgreSQL tests then fail instead of skip
source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

_frachub_pg_bin() {
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && { echo "$dir"; return 0; }
    done
    return 1
}

if [ -z "${FRACHUB_PG_BIN:-}" ] && ! FRACHUB_PG_BIN=$(_frachub_pg_bin); then
    # the package's own cluster is not wanted: tests run their own in a temporary directory
    frachub_apt_install postgres.sh postgresql "the PostgreSQL tests" || {
        return 1 2>/dev/null || exit 1
    }
    if ! FRACHUB_PG_BIN=$(_frachub_pg_bin); then
        echo "postgres.sh: apt-get finished but no /usr/lib/postgresql/*/bin/initdb" >&2
        return 1 2>/dev/null || exit 1
    fi
fi
unset -f _frachub_pg_bin
FRACHUB_REQUIRE_POSTGRES=1
export FRACHUB_PG_BIN FRACHUB_REQUIRE_POSTGRES
