# debian-root.sh: what scripts/release-tier and scripts/systemd-tier share, to
# be sourced (bash). The caller defines say and die, and sets SUITE (trixie |
# sid) and CACHE (default /var/cache/slurm-drf) before calling these:
#
#   root_packages            PACKAGES: the packages of SUITE's root
#   root_lock MODE           flock $ROOTS/SUITE.lock on fd 8: -x to change the
#                            root in place, -s to only read it
#   root_ensure              ROOT_DIR: a complete root for SUITE, built or
#                            completed when needed (under the exclusive lock)
#   nspawn CMD...            runs CMD in $ROOT (--pipe, --as-pid2, NSPAWN_ARGS)
#   external_db_start PORT DBNAME PASSFILE
#                            a private MariaDB 10.11 from the host on
#                            127.0.0.1:PORT, a new datadir every run; a user
#                            slurm@127.0.0.1 with every right on DBNAME, its
#                            password written to PASSFILE (a host path)
#   external_db_stop         stops it and removes its datadir (idempotent)
#   repo_copy DEST           the repository as git sees it now (committed or
#                            not, ignored files left out) into DEST, afresh
#
# The root lives under $CACHE/roots/SUITE; it is built in a scratch directory
# and renamed only when complete, so a killed build is redone, never reused.

ROOTS="$CACHE/roots"
ROOT_DIR="$ROOTS/$SUITE"

# Packages of the root: the sandbox's (scripts/slurm-sandbox PACKAGES), a
# venv, the browser the report tests look through (scripts/test's TOOLS), and
# for trixie's pyslurm build a compiler, Python's and Slurm's headers.
root_packages() {
    PACKAGES=(slurm-wlm slurm-client slurmdbd munge mariadb-server mariadb-client
              python3-venv ca-certificates chromium)
    [[ "$SUITE" == trixie ]] && PACKAGES+=(gcc libc6-dev python3-dev libslurm-dev)
    return 0
}

# The Debian mirror this machine's apt already uses (deb822 or one-line
# sources), unless SLURM_DRF_DEBIAN_MIRROR names another.
host_mirror() {
    { sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | tr ' ' '\n'
      awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; break } }' \
          /etc/apt/sources.list 2>/dev/null; } | grep -v -- '-security' | grep -m1 '/debian/*$' || true
}

host_tools() {
    local missing=()
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    command -v systemd-nspawn >/dev/null || missing+=(systemd-container)
    command -v nsenter >/dev/null || missing+=(util-linux)
    [[ -x /usr/sbin/mariadbd ]] && command -v mariadb-install-db >/dev/null || missing+=(mariadb-server)
    [[ ${#missing[@]} -eq 0 ]] && return 0
    say "installing on the host: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

root_lock() {
    local mode=$1
    mkdir -p "$ROOTS"
    exec 8>"$ROOTS/$SUITE.lock"
    if ! flock -n "$mode" 8; then
        say "waiting for another run on the $SUITE root"
        flock -w 3600 "$mode" 8 || die "could not lock $ROOTS/$SUITE.lock"
    fi
}

# Runs a command in the container. --as-pid2: a stub init reaps the
# daemons' orphans; when the command ends, the container and every daemon
# started in it go.
NSPAWN_ARGS=()
nspawn() {
    systemd-nspawn --quiet --register=no --keep-unit --as-pid2 -D "$ROOT" \
        --bind-ro=/etc/ssl/certs/ca-certificates.crt:/etc/slurm-drf-host-ca.crt \
        --setenv=PIP_CERT=/etc/slurm-drf-host-ca.crt \
        --setenv=DEBIAN_FRONTEND=noninteractive \
        "${NSPAWN_ARGS[@]}" --pipe "$@"
}

# Installs the package list in $ROOT and stamps it.
_root_install_packages() {
    say "installing ${PACKAGES[*]} in the root"
    nspawn sh -c "apt-get -o Acquire::Check-Valid-Until=false update -qq &&
        apt-get install -y -qq --no-install-recommends ${PACKAGES[*]} && apt-get clean" \
        >"$ROOTS/.$SUITE.apt.log" 2>&1 ||
        { tail -n 30 "$ROOTS/.$SUITE.apt.log" >&2; die "apt-get install in the $SUITE root failed"; }
    printf '%s\n' "$STAMP" >"$ROOT/.slurm-drf-root"
}

_root_build() {
    local mirror scratch="$ROOTS/.$SUITE.build"
    mirror="${SLURM_DRF_DEBIAN_MIRROR:-$(host_mirror)}"
    [[ -n "$mirror" ]] || die "no Debian mirror in this machine's apt sources: set SLURM_DRF_DEBIAN_MIRROR"
    rm -rf "$scratch"
    say "building a Debian $SUITE root (debootstrap; once per machine)"
    local t0=$SECONDS
    debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,python3 \
        "$SUITE" "$scratch" "$mirror" >"$ROOTS/.$SUITE.debootstrap.log" 2>&1 ||
        { tail -n 30 "$ROOTS/.$SUITE.debootstrap.log" >&2; die "debootstrap $SUITE failed"; }
    # Package scripts must not start services in the root.
    printf '#!/bin/sh\nexit 101\n' >"$scratch/usr/sbin/policy-rc.d"
    chmod 0755 "$scratch/usr/sbin/policy-rc.d"
    ROOT=$scratch
    _root_install_packages
    rm -rf "$ROOT_DIR"
    mv "$scratch" "$ROOT_DIR"
    say "root ready in $((SECONDS - t0))s"
}

# The stamp names the package list installed: a complete root with another
# list gets the new packages installed in place (apt-get redoes an
# interrupted install), a missing one is built.
root_ensure() {
    root_packages
    STAMP="$SUITE ${PACKAGES[*]}"
    host_tools
    if [[ ! -f "$ROOT_DIR/.slurm-drf-root" ]]; then
        _root_build
    elif [[ "$(<"$ROOT_DIR/.slurm-drf-root")" != "$STAMP" ]]; then
        ROOT=$ROOT_DIR
        _root_install_packages
    else
        say "reusing the $SUITE root in $ROOT_DIR"
    fi
    ROOT=$ROOT_DIR
}

DB_RUN=""
DB_PID=""
external_db_stop() {
    if [[ -n "$DB_PID" ]] && kill -0 "$DB_PID" 2>/dev/null; then
        kill -TERM "$DB_PID" 2>/dev/null || true
        local deadline=$((SECONDS + 30))
        while kill -0 "$DB_PID" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
    fi
    [[ -n "$DB_RUN" ]] && rm -rf "$DB_RUN"
    DB_PID=""
    DB_RUN=""
    return 0
}

external_db_start() {
    local port=$1 dbname=$2 passfile=$3
    DB_RUN=$(mktemp -d -p /var/tmp "slurm-drf-db-$SUITE.XXXXXX")
    local data="$DB_RUN/data" sock="$DB_RUN/mysqld.sock"
    say "starting a private MariaDB ($(mariadbd --version | awk '{print $3}')) on 127.0.0.1:$port"
    mariadb-install-db --no-defaults --user=root --datadir="$data" \
        --auth-root-authentication-method=socket --skip-test-db >"$DB_RUN/install.log" 2>&1 ||
        { tail -n 20 "$DB_RUN/install.log" >&2; die "mariadb-install-db failed"; }
    setsid mariadbd --no-defaults --user=root --datadir="$data" --socket="$sock" \
        --port="$port" --bind-address=127.0.0.1 --skip-name-resolve \
        --pid-file="$DB_RUN/mariadbd.pid" --log-error="$DB_RUN/mariadbd.log" \
        --innodb-lock-wait-timeout=900 </dev/null >>"$DB_RUN/mariadbd.out" 2>&1 8>&- &
    DB_PID=$!
    local deadline=$((SECONDS + 60))
    until mariadb --no-defaults -S "$sock" -u root -e 'SELECT 1' >/dev/null 2>&1; do
        kill -0 "$DB_PID" 2>/dev/null || { tail -n 20 "$DB_RUN/mariadbd.log" >&2; die "mariadbd exited"; }
        ((SECONDS < deadline)) || die "mariadbd did not answer within 60s"
        sleep 0.2
    done
    local pass
    pass=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
    mkdir -p "$(dirname "$passfile")"
    (umask 077 && printf '%s\n' "$pass" >"$passfile")
    mariadb --no-defaults -S "$sock" -u root <<SQL
CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
GRANT ALL ON $dbname.* TO 'slurm'@'127.0.0.1';
SQL
}

repo_copy() {
    local dest=$1
    rm -rf "${dest:?}"
    mkdir -p "$dest"
    (cd "$REPO" && git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' f; do [[ -e "$f" ]] && printf '%s\0' "$f"; done |
        tar --null -T - -cf - | tar -xf - -C "$dest")
}
