#!/usr/bin/env bash
# Builds the base image of the cluster tests, multinode-base:bookworm, with no
# container registry: debootstrap a Debian bookworm rootfs from Debian's mirror
# into a temporary folder, install the packages the tests need in a chroot, and
# `docker import` the result.
#
# Idempotent: the image carries the sha256 of this file as the label
# org.multinode.base.recipe; when the tagged image already has the hash of the
# current file, nothing is done. Any edit to this file is a new recipe.
#
# Environment:
#   MULTINODE_BASE_IMAGE  tag to build (default multinode-base:bookworm, the
#                         tag the Dockerfile's FROM names)
#   DEBIAN_MIRROR         default http://deb.debian.org/debian
#   MULTINODE_BASE_FORCE  1: rebuild even when the recipe is unchanged
#   TMPDIR                where the rootfs is made (default /var/tmp; must
#                         allow device nodes, so not a nodev mount)
#
# Needs root (debootstrap, chroot, mount), debootstrap, and a Docker engine.
set -euo pipefail

IMAGE=${MULTINODE_BASE_IMAGE:-multinode-base:bookworm}
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# What the cluster tests need: both MPI stacks (side by side through Debian's
# alternatives), a C compiler for MPI test programs, process and network tools
# (curl: the forward scenario fetches through `mn-ssh -L`; OpenSSH's ssh: the
# terminal scenario logs into an agent with it),
# and Slurm with its authentication service (the slurm-* scenarios run
# slurmctld and slurmd in containers of this image; no daemon is started here).
PACKAGES=(
    openmpi-bin libopenmpi-dev
    mpich libmpich-dev
    gcc libc6-dev
    procps iproute2 iputils-ping curl openssh-client
    python3
    slurm-wlm munge
)
LABEL=org.multinode.base.recipe

log() { printf '[build-base-image %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf 'build-base-image: error: %s\n' "$*" >&2; exit 1; }

self=$(readlink -f "${BASH_SOURCE[0]}")
recipe=$(sha256sum "$self" | cut -d' ' -f1)

command -v docker >/dev/null || die "docker not found"
docker info >/dev/null 2>&1 || die "the Docker engine does not answer (docker info failed)"

have=$(docker image inspect -f "{{ index .Config.Labels \"$LABEL\" }}" "$IMAGE" 2>/dev/null || true)
if [[ $have == "$recipe" && ${MULTINODE_BASE_FORCE:-0} != 1 ]]; then
    log "$IMAGE is up to date (recipe ${recipe:0:12}); nothing to do"
    exit 0
fi

[[ $(id -u) == 0 ]] || die "must run as root (debootstrap, chroot and mount need it)"
command -v debootstrap >/dev/null || die "debootstrap not found (apt-get install debootstrap)"

# One build at a time on this engine; a second caller waits, then finds the
# image up to date.
exec 9>"${TMPDIR:-/var/tmp}/multinode-base-image.lock"
flock 9
have=$(docker image inspect -f "{{ index .Config.Labels \"$LABEL\" }}" "$IMAGE" 2>/dev/null || true)
if [[ $have == "$recipe" && ${MULTINODE_BASE_FORCE:-0} != 1 ]]; then
    log "$IMAGE was built by another caller meanwhile; nothing to do"
    exit 0
fi

start=$SECONDS
work=$(mktemp -d "${TMPDIR:-/var/tmp}/multinode-base.XXXXXX")
rootfs=$work/rootfs
# The import is tagged as a candidate until it passes its checks.
candidate=multinode-base-candidate:${recipe:0:12}

# Unmount whatever is mounted under the work folder (deepest first), then
# delete it without crossing into any mount that is left: a bind-mounted /dev
# must never be deleted through the rootfs.
cleanup() {
    local rc=$? mnt
    set +e
    if [[ -n ${work:-} && -d $work ]]; then
        while read -r mnt; do
            umount -l "$mnt" 2>/dev/null
        done < <(awk -v w="$work" 'index($5, w"/") == 1 { print $5 }' /proc/self/mountinfo | sort -r)
        rm -rf --one-file-system "$work"
    fi
    # The candidate tag goes; an image that failed its checks, or was
    # imported by a command that then failed, goes with it.
    docker rmi "$candidate" >/dev/null 2>&1
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

in_root() {
    chroot "$rootfs" /usr/bin/env -i \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

log "debootstrap --variant=minbase $SUITE from $MIRROR into $rootfs"
debootstrap --variant=minbase --components=main "$SUITE" "$rootfs" "$MIRROR" \
    >"$work/debootstrap.log" 2>&1 || {
    tail -n 30 "$work/debootstrap.log" >&2
    die "debootstrap failed (log above)"
}
log "debootstrap done ($((SECONDS - start))s)"

# Keep the image small: no docs, man pages or translations from now on, no
# recommends, and no services started by package scripts.
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/01-multinode-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
cat >"$rootfs/etc/apt/apt.conf.d/01-multinode" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
EOF
cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
EOF
printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
chmod 755 "$rootfs/usr/sbin/policy-rc.d"

mount -t proc proc "$rootfs/proc"
log "apt-get install ${PACKAGES[*]}"
{
    in_root apt-get update &&
        in_root apt-get install -y --no-install-recommends "${PACKAGES[@]}"
} >"$work/apt.log" 2>&1 || {
    tail -n 30 "$work/apt.log" >&2
    die "apt-get failed in the chroot (log above)"
}
umount "$rootfs/proc"
log "packages installed ($((SECONDS - start))s)"

# Clean up what a running system does not need.
in_root apt-get clean
rm -f "$rootfs/usr/sbin/policy-rc.d"
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/cache/debconf/*-old "$rootfs"/var/lib/dpkg/*-old \
    "$rootfs"/var/log/apt/* "$rootfs"/tmp/* "$rootfs"/var/tmp/*
: >"$rootfs/var/log/dpkg.log"
: >"$rootfs/var/log/alternatives.log"
find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/*

# Docker writes /etc/hosts, /etc/hostname and /etc/resolv.conf into every
# container at run time. What the image holds must not leak the build host
# (debootstrap copies its /etc/hostname and /etc/resolv.conf), and must not map
# a host name to 127.0.1.1 as Debian's installer does: that is the classic
# cause of a head node advertising a loopback address.
cat >"$rootfs/etc/hosts" <<'EOF'
127.0.0.1	localhost
::1	localhost ip6-localhost ip6-loopback
ff02::1	ip6-allnodes
ff02::2	ip6-allrouters
EOF
: >"$rootfs/etc/hostname"
: >"$rootfs/etc/resolv.conf"
: >"$rootfs/etc/machine-id"
# munge's postinst makes a key; an image must not carry one (every Slurm
# cluster of the tests makes its own).
rm -f "$rootfs/etc/munge/munge.key"

log "docker import"
new_id=$(tar -C "$rootfs" --numeric-owner --exclude='./dev/*' --exclude='./proc/*' \
    --exclude='./sys/*' -cf - . |
    docker import \
        --change "LABEL $LABEL=$recipe" \
        --change "LABEL org.multinode.base.suite=$SUITE" \
        --change "LABEL org.multinode.base.packages=\"${PACKAGES[*]}\"" \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' \
        --message "multinode base: debootstrap --variant=minbase $SUITE + ${PACKAGES[*]}" \
        - "$candidate")

log "checking the image: both MPI stacks compile and run a 2-process job"
# The script is an argument, not stdin: mpirun forwards its stdin to rank 0,
# and would swallow the rest of a script read from stdin.
check=$(cat <<'EOF'
set -euo pipefail
cat >/tmp/hello.c <<'C'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("size=%d sum=%d\n", size, sum);
    MPI_Finalize();
    return 0;
}
C
mpicc.openmpi -o /tmp/hello-ompi /tmp/hello.c
mpicc.mpich -o /tmp/hello-mpich /tmp/hello.c
out=$(mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 /tmp/hello-ompi </dev/null)
[ "$out" = "size=2 sum=1" ] || { echo "mpirun.openmpi: got '$out'"; exit 1; }
out=$(mpiexec.mpich -n 2 /tmp/hello-mpich </dev/null)
[ "$out" = "size=2 sum=1" ] || { echo "mpiexec.mpich: got '$out'"; exit 1; }
python3 -c 'import json'
ip -V >/dev/null; ping -V >/dev/null; ps -p 1 >/dev/null
# (the Slurm clients want a cluster's configuration even for --version)
slurmctld -V >/dev/null; slurmd -V >/dev/null; command -v sbatch srun scancel scontrol sacct >/dev/null
munged --version >/dev/null; id munge >/dev/null; id slurm >/dev/null
[ ! -e /etc/munge/munge.key ]
[ "$LANG" = C.UTF-8 ]
echo "checks passed; mpirun -> $(readlink -f "$(command -v mpirun)"), mpicc -> $(readlink -f "$(command -v mpicc)"), $(slurmd -V)"
EOF
)
if ! docker run --rm --network none "$new_id" bash -c "$check" >"$work/check.log" 2>&1 ||
    ! grep -q '^checks passed' "$work/check.log"; then
    cat "$work/check.log" >&2
    die "the new image failed its checks (output above)"
fi
log "$(grep '^checks passed' "$work/check.log")"

old_id=$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)
docker tag "$new_id" "$IMAGE"
if [[ -n $old_id && $old_id != "$new_id" ]]; then
    # The previous recipe's image, now untagged; kept if a container uses it.
    docker rmi "$old_id" >/dev/null 2>&1 || true
fi
size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
log "built $IMAGE (${new_id:7:12}, recipe ${recipe:0:12}, $((size / 1000000)) MB) in $((SECONDS - start))s"
