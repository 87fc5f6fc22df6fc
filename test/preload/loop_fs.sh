#!/usr/bin/env bash
# loop_fs.sh mount <xfs|btrfs|ext4> <dir> | umount <dir>
# The loop-mounted file system that the preload.<type>.* cases run in (ctest fixture
# preload_<type>: CMakeLists.txt runs `mount` before them and `umount` after). mount makes a
# sparse image under ${TAI_TEST_DIR:-/var/tmp} (XFS: 300 MiB, its minimum; btrfs: 256 MiB, above
# its minimum of about 110; ext4: 64 MiB), runs mkfs.<type> and mounts it on <dir>. Where that
# cannot be done (not root, the mkfs tool missing, no loop device, the mount refused) it writes
# the reason into <dir>.skip and still exits 0: each case then skips with that reason, which a
# failed fixture (ctest's "Not Run") would hide. umount unmounts, removes the image and the
# reason.
set -u -o pipefail

usage() {
  echo "usage: $0 mount <xfs|btrfs|ext4> <dir> | umount <dir>" >&2
  exit 2
}

image_of() {  # one image per mount point: release, asan and tsan may run at once
  echo "${TAI_TEST_DIR:-/var/tmp}/tai-preload-fs-$(printf '%s' "$1" | md5sum | cut -c1-16).img"
}

case ${1:-} in
  mount)
    [[ $# -eq 3 ]] || usage
    type=$2
    dir=$3
    img=$(image_of "$dir")
    rm -f "$dir.skip"
    mkdir -p "$dir" || { echo "cannot create $dir" >"$dir.skip"; exit 0; }
    # A mount left by an interrupted run: unmount it first.
    if mountpoint -q "$dir"; then umount "$dir" 2>/dev/null || umount -l "$dir"; fi
    case $type in
      xfs) mib=300 mkfs=(mkfs.xfs -q -f) package=xfsprogs ;;
      btrfs) mib=256 mkfs=(mkfs.btrfs -q -f) package=btrfs-progs ;;
      ext4) mib=64 mkfs=(mkfs.ext4 -q -F) package=e2fsprogs ;;
      *) usage ;;
    esac
    skip() {
      echo "$*" >"$dir.skip"
      echo "loop_fs.sh: $type not mounted on $dir: $*"
      rm -f "$img"
      exit 0
    }
    [[ $(id -u) -eq 0 ]] || skip "mounting a loop $type needs root"
    command -v "${mkfs[0]}" >/dev/null 2>&1 || skip "${mkfs[0]} is not installed (Debian package $package)"
    rm -f "$img"
    truncate -s "${mib}M" "$img" || skip "cannot create the image $img"
    out=$("${mkfs[@]}" "$img" 2>&1) || skip "${mkfs[*]} on a $mib MiB image failed: $(echo "$out" | tail -2 | tr '\n' ' ')"
    out=$(mount -o loop "$img" "$dir" 2>&1) || skip "mount -o loop (a $type image) failed: $out"
    echo "loop_fs.sh: $type ($mib MiB, $img) mounted on $dir"
    ;;
  umount)
    [[ $# -eq 2 ]] || usage
    dir=$2
    img=$(image_of "$dir")
    if mountpoint -q "$dir"; then
      umount "$dir" 2>/dev/null || umount -l "$dir" || { echo "loop_fs.sh: cannot unmount $dir"; exit 1; }
    fi
    rm -f "$img" "$dir.skip"
    rmdir "$dir" 2>/dev/null
    exit 0
    ;;
  *) usage ;;
esac
