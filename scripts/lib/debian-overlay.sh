# shellcheck shell=bash
# debian-overlay.sh: a throwaway container on an overlay of the cached Debian
# root, for scripts/build-deb and scripts/check-deb. To be sourced (bash)
# after debian-root.sh, with say and die defined:
#
#   overlay_up NAME     locks the root for reading (building or completing it
#                       first), mounts an overlay of it on $ROOT (a new
#                       directory under /var/tmp, $RUN/root) and points
#                       nspawn at it; the cached root is only read, every
#                       change lands in $RUN/upper
#   overlay_down        unmounts and removes it (trapped on EXIT by overlay_up)
#
# apt's downloads are kept between runs in $CACHE/apt-archives/SUITE (bound
# over the container's /var/cache/apt/archives).

RUN=""
overlay_down() {
    local status=$?
    if [[ -n "$RUN" ]]; then
        if mountpoint -q "$RUN/root"; then
            umount "$RUN/root" || umount -l "$RUN/root" || true
        fi
        if mountpoint -q "$RUN/root"; then
            say "could not unmount $RUN/root; leaving $RUN"
        else
            rm -rf "$RUN"
        fi
    fi
    exit "$status"
}

overlay_up() {
    local name=$1
    root_lock -x
    root_ensure
    root_lock -s
    RUN=$(mktemp -d -p /var/tmp "slurm-drf-$name.XXXXXX")
    trap overlay_down EXIT
    mkdir -p "$RUN/upper" "$RUN/work" "$RUN/root" "$CACHE/apt-archives/$SUITE/partial"
    mount -t overlay overlay -o "lowerdir=$ROOT_DIR,upperdir=$RUN/upper,workdir=$RUN/work" "$RUN/root"
    ROOT="$RUN/root"
    NSPAWN_ARGS=(--bind="$CACHE/apt-archives/$SUITE":/var/cache/apt/archives)
}
