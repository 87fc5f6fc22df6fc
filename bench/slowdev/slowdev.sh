#!/usr/bin/env bash
# slowdev.sh: a slow block device made from real kernel parts, for benchmarks that need storage
# slower than a local disk (shared HPC storage), so that there is I/O for TAI to hide.
#
#   slowdev.sh up         [options]   image file -> loop device -> mkfs -> mount -> throttle rule
#   slowdev.sh calibrate  [options]   fio on the mount: write MB/s and fsync latency percentiles;
#                                     prints the calibration and keeps it in <state>/calibration.txt
#   slowdev.sh down       [options]   remove the rule, unmount, detach, delete the image (idempotent:
#                                     also cleans what an interrupted `up` left behind)
#   slowdev.sh status     [options]   what is set up (exit 1 when nothing is)
#   slowdev.sh exec [options] -- CMD  run CMD where the rule applies (cgroup v2: inside the cgroup)
#   slowdev.sh probe                  can this machine do it? exit 0, or 77 with the reason
#
# Options (or the environment variable in brackets):
#   --name N        instance name; image, state and cgroup are per name  [SLOWDEV_NAME, tai-slowdev]
#   --mnt DIR       mount point                                [SLOWDEV_MNT, /mnt/<name>]
#   --fs ext4|xfs   file system                                [SLOWDEV_FS, ext4]
#   --size MIB      image size in MiB (sparse)                 [SLOWDEV_SIZE_MIB, 4096]
#   --wmbps R       write limit, MB/s (10^6 bytes); 0 = none   [SLOWDEV_WMBPS, 50]
#   --wiops R       write limit, requests/s; 0 = none          [SLOWDEV_WIOPS, 0]
#   --rmbps R       read limit, MB/s; 0 = none                 [SLOWDEV_RMBPS, 0]
#   --riops R       read limit, requests/s; 0 = none           [SLOWDEV_RIOPS, 0]
#   --image-dir D   where the image file goes                  [SLOWDEV_IMAGE_DIR, /var/tmp]
#   --seconds S     calibrate: seconds per fio job             [SLOWDEV_CAL_SECONDS, 4]
#
# The throttle: cgroup v1's blkio.throttle.{write,read}_{bps,iops}_device in the root blkio cgroup
# (its rule applies to every process and to the kernel's write-back), else cgroup v2's io.max in a
# child cgroup <name> (the root of v2 has no io.max), which `exec` puts the command into. The
# loop device is attached with direct I/O where the kernel allows it, so that what passes the
# throttle really goes to the disk under the image instead of the page cache a second time.
set -u -o pipefail

die() { echo "slowdev: $*" >&2; exit 1; }
skip() { echo "slowdev: cannot run here: $*" >&2; exit 77; }

cmd=${1:-}
[[ $# -gt 0 ]] && shift
NAME=${SLOWDEV_NAME:-tai-slowdev}
MNT=${SLOWDEV_MNT:-}
FS=${SLOWDEV_FS:-ext4}
SIZE_MIB=${SLOWDEV_SIZE_MIB:-4096}
WMBPS=${SLOWDEV_WMBPS:-50}
WIOPS=${SLOWDEV_WIOPS:-0}
RMBPS=${SLOWDEV_RMBPS:-0}
RIOPS=${SLOWDEV_RIOPS:-0}
IMAGE_DIR=${SLOWDEV_IMAGE_DIR:-/var/tmp}
CAL_SECONDS=${SLOWDEV_CAL_SECONDS:-4}
exec_cmd=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --name) NAME=$2; shift 2 ;;
    --mnt) MNT=$2; shift 2 ;;
    --fs) FS=$2; shift 2 ;;
    --size) SIZE_MIB=$2; shift 2 ;;
    --wmbps) WMBPS=$2; shift 2 ;;
    --wiops) WIOPS=$2; shift 2 ;;
    --rmbps) RMBPS=$2; shift 2 ;;
    --riops) RIOPS=$2; shift 2 ;;
    --image-dir) IMAGE_DIR=$2; shift 2 ;;
    --seconds) CAL_SECONDS=$2; shift 2 ;;
    --) shift; exec_cmd=("$@"); break ;;
    *) die "unknown option $1 (see the head of $0)" ;;
  esac
done
[[ $NAME =~ ^[A-Za-z0-9_.-]+$ ]] || die "--name: letters, digits, . _ - only"
MNT=${MNT:-/mnt/$NAME}
IMG=$IMAGE_DIR/$NAME.img
STATE_DIR=/run/tai-slowdev/$NAME
V1=/sys/fs/cgroup/blkio
V2_ROOT=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
V2=${V2_ROOT:+$V2_ROOT/$NAME}

mbps_to_bytes() { awk -v r="$1" 'BEGIN { printf "%d", r * 1000000 }'; }

# Which throttle this machine offers: v1 (root rule), v2 (io.max in a child), or none.
throttle_kind() {
  if [[ -w $V1/blkio.throttle.write_bps_device ]]; then echo v1; return; fi
  if [[ -n $V2_ROOT && -r $V2_ROOT/cgroup.controllers ]] && grep -qw io "$V2_ROOT/cgroup.controllers"; then
    echo v2; return
  fi
  echo none
}

probe() {
  [[ $(id -u) -eq 0 ]] || skip "needs root (losetup, mount, the block throttle)"
  command -v losetup >/dev/null || skip "losetup is not installed (util-linux)"
  local mkfs=mkfs.$FS
  command -v "$mkfs" >/dev/null || skip "$mkfs is not installed"
  [[ -e /dev/loop-control ]] || modprobe loop 2>/dev/null
  [[ -e /dev/loop-control ]] || skip "no /dev/loop-control (no loop driver)"
  [[ $(throttle_kind) != none ]] || skip "no block throttle: neither $V1/blkio.throttle.write_bps_device nor a cgroup v2 with the io controller"
}

# Every loop device backed by our image (an interrupted `up` may have left several).
loops_of_image() { [[ -e $IMG ]] && losetup -j "$IMG" -O NAME -n 2>/dev/null | awk '{ print $1 }'; }

# Removes this device's rule from v1's four files (a rate 0 deletes the entry).
clear_v1_rule() {
  local majmin=$1 f
  for f in write_bps_device write_iops_device read_bps_device read_iops_device; do
    [[ -w $V1/blkio.throttle.$f ]] || continue
    if grep -q "^$majmin " "$V1/blkio.throttle.$f"; then echo "$majmin 0" >"$V1/blkio.throttle.$f"; fi
  done
}

rule_present() {  # prints where a rule for majmin is, exit 0 when one is
  local majmin=$1 f found=1
  for f in write_bps_device write_iops_device read_bps_device read_iops_device; do
    if [[ -r $V1/blkio.throttle.$f ]] && grep -q "^$majmin " "$V1/blkio.throttle.$f"; then
      echo "$V1/blkio.throttle.$f: $(grep "^$majmin " "$V1/blkio.throttle.$f")"; found=0
    fi
  done
  if [[ -n $V2 && -r $V2/io.max ]] && grep -q "^$majmin " "$V2/io.max"; then
    echo "$V2/io.max: $(grep "^$majmin " "$V2/io.max")"; found=0
  fi
  return $found
}

down() {
  local dev majmin loops=() pid
  # The state first: the device `up` recorded, even if the image is gone.
  if [[ -r $STATE_DIR/env ]]; then
    dev=$(sed -n 's/^DEV=//p' "$STATE_DIR/env")
    [[ -n $dev ]] && loops+=("$dev")
    majmin=$(sed -n 's/^MAJMIN=//p' "$STATE_DIR/env")
    [[ -n $majmin ]] && clear_v1_rule "$majmin"
  fi
  while read -r dev; do [[ -n $dev ]] && loops+=("$dev"); done < <(loops_of_image)
  # Rules first, so that unmounting writes back at the disk's speed, not the throttled one.
  for dev in "${loops[@]}"; do
    [[ -b $dev ]] || continue
    majmin=$(lsblk -dno MAJ:MIN "$dev" 2>/dev/null | tr -d ' ')
    [[ -n $majmin ]] && clear_v1_rule "$majmin"
    if [[ -n $majmin && -n $V2 && -w $V2/io.max ]]; then
      echo "$majmin rbps=max wbps=max riops=max wiops=max" >"$V2/io.max" 2>/dev/null
    fi
  done
  # Every mount of our devices, and whatever is on the mount point.
  for dev in "${loops[@]}"; do
    [[ -b $dev ]] || continue
    while read -r target; do
      [[ -n $target ]] || continue
      umount "$target" 2>/dev/null || umount -l "$target" 2>/dev/null || echo "slowdev: cannot unmount $target" >&2
    done < <(findmnt -rno TARGET -S "$dev" 2>/dev/null)
  done
  if mountpoint -q "$MNT" 2>/dev/null; then
    local src
    src=$(findmnt -rno SOURCE "$MNT")
    case $src in
      /dev/loop*) umount "$MNT" 2>/dev/null || umount -l "$MNT" ;;
      *) echo "slowdev: $MNT holds $src, not a loop device: left mounted" >&2 ;;
    esac
  fi
  for dev in "${loops[@]}"; do
    [[ -b $dev ]] || continue
    # Detach only a device still backed by our image (the number may have been reused).
    if losetup -n -O BACK-FILE "$dev" 2>/dev/null | grep -qF "$IMG"; then
      losetup -d "$dev" 2>/dev/null || echo "slowdev: cannot detach $dev" >&2
    fi
  done
  # cgroup v2: move our processes back to the root, then remove the cgroup.
  if [[ -n $V2 && -d $V2 ]]; then
    while read -r pid; do echo "$pid" >"$V2_ROOT/cgroup.procs" 2>/dev/null; done <"$V2/cgroup.procs"
    rmdir "$V2" 2>/dev/null
  fi
  rm -f "$IMG"
  rm -rf "$STATE_DIR"
  rmdir "$MNT" 2>/dev/null
  # What is left, said plainly: the test checks it.
  local left=0
  if [[ -n $(loops_of_image) ]]; then echo "slowdev: loop devices left: $(loops_of_image)" >&2; left=1; fi
  if mountpoint -q "$MNT" 2>/dev/null; then echo "slowdev: $MNT still mounted" >&2; left=1; fi
  return $left
}

up() {
  probe
  local kind dev majmin wb
  kind=$(throttle_kind)
  down >/dev/null 2>&1  # what an earlier run left behind
  trap 'echo "slowdev: up failed; cleaning up" >&2; down; exit 1' ERR
  set -E
  mkdir -p "$STATE_DIR" "$MNT" "$IMAGE_DIR"
  rm -f "$IMG"
  truncate -s "${SIZE_MIB}M" "$IMG"
  # --direct-io=on: the loop device's writes reach the disk under the image, not a second page cache.
  dev=$(losetup -f --show --direct-io=on "$IMG" 2>/dev/null) || dev=$(losetup -f --show "$IMG")
  majmin=$(lsblk -dno MAJ:MIN "$dev" | tr -d ' ')
  printf 'DEV=%s\nMAJMIN=%s\nMNT=%s\nIMG=%s\nFS=%s\nKIND=%s\n' "$dev" "$majmin" "$MNT" "$IMG" "$FS" "$kind" >"$STATE_DIR/env"
  case $FS in
    ext4) mkfs.ext4 -q -F "$dev" ;;
    xfs) mkfs.xfs -q -f "$dev" ;;
    *) false ;;
  esac
  mount "$dev" "$MNT"
  chmod 1777 "$MNT"
  # The rule goes on after mkfs, which would otherwise run at the throttled rate.
  if [[ $kind == v1 ]]; then
    [[ $WMBPS != 0 ]] && echo "$majmin $(mbps_to_bytes "$WMBPS")" >"$V1/blkio.throttle.write_bps_device"
    [[ $WIOPS != 0 ]] && echo "$majmin $WIOPS" >"$V1/blkio.throttle.write_iops_device"
    [[ $RMBPS != 0 ]] && echo "$majmin $(mbps_to_bytes "$RMBPS")" >"$V1/blkio.throttle.read_bps_device"
    [[ $RIOPS != 0 ]] && echo "$majmin $RIOPS" >"$V1/blkio.throttle.read_iops_device"
  else
    grep -qw io "$V2_ROOT/cgroup.subtree_control" || echo "+io" >"$V2_ROOT/cgroup.subtree_control"
    mkdir -p "$V2"
    wb=max; [[ $WMBPS != 0 ]] && wb=$(mbps_to_bytes "$WMBPS")
    local wi=max ri=max rb=max
    [[ $WIOPS != 0 ]] && wi=$WIOPS
    [[ $RIOPS != 0 ]] && ri=$RIOPS
    [[ $RMBPS != 0 ]] && rb=$(mbps_to_bytes "$RMBPS")
    echo "$majmin rbps=$rb wbps=$wb riops=$ri wiops=$wi" >"$V2/io.max"
  fi
  printf 'WMBPS=%s\nWIOPS=%s\nRMBPS=%s\nRIOPS=%s\n' "$WMBPS" "$WIOPS" "$RMBPS" "$RIOPS" >>"$STATE_DIR/env"
  trap - ERR
  echo "slowdev: $FS on $dev ($majmin, image $IMG, ${SIZE_MIB} MiB) mounted on $MNT; throttle ($kind):" \
    "write ${WMBPS} MB/s, ${WIOPS} IOPS; read ${RMBPS} MB/s, ${RIOPS} IOPS (0 = no limit)"
}

load_state() {
  [[ -r $STATE_DIR/env ]] || die "$NAME is not up (no $STATE_DIR/env): run 'slowdev.sh up' first"
  # shellcheck disable=SC1091
  . "$STATE_DIR/env"
}

# Runs a command where the rule applies: v1's root rule applies to everything; v2's to the cgroup.
run_in() {
  if [[ ${KIND:-v1} == v2 && -n $V2 && -d $V2 ]]; then
    echo $BASHPID >"$V2/cgroup.procs" || die "cannot enter $V2"
  fi
  "$@"
}

calibrate() {
  load_state
  command -v fio >/dev/null || die "fio is not installed"
  local dir=$MNT/.calibrate out host mib
  mkdir -p "$dir"
  # The streaming job writes about what the rule passes in the given seconds (the final fsync
  # would otherwise wait for a whole page cache's worth at the throttled rate).
  mib=$(awk -v r="$WMBPS" -v s="$CAL_SECONDS" 'BEGIN { m = (r > 0 ? r : 500) * s; printf "%d", (m < 32 ? 32 : m) }')
  # 1. streaming write (1 MiB requests, the page cache in between, fsync at the end: the way the
  #    workloads write); 2. 4 KiB writes each followed by fsync: the latency an fsync costs.
  (run_in fio --name=stream --directory="$dir" --rw=write --bs=1M --size="${mib}M" --ioengine=psync \
    --end_fsync=1 --output-format=json >"$STATE_DIR/fio-stream.json") ||
    die "fio (streaming write) failed"
  rm -f "$dir"/*
  (run_in fio --name=fsync --directory="$dir" --rw=write --bs=4k --size=64M --ioengine=psync \
    --fsync=1 --time_based=1 --runtime="$CAL_SECONDS" --output-format=json >"$STATE_DIR/fio-fsync.json") ||
    die "fio (fsync latency) failed"
  rm -rf "$dir"
  host=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
  out=$(python3 - "$STATE_DIR/fio-stream.json" "$STATE_DIR/fio-fsync.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))["jobs"][0]
f = json.load(open(sys.argv[2]))["jobs"][0]
mbs = s["write"]["io_bytes"] / 1e6 / (s["job_runtime"] / 1e3) if s["job_runtime"] else 0.0
sync = f.get("sync", {}).get("lat_ns", {})
pct = sync.get("percentile", {})
def p(k):
    v = pct.get(k)
    return "%.2f" % (v / 1e6) if v is not None else "n/a"
n = sync.get("N", 0)
print("fio write, 1 MiB requests, end fsync: %.1f MB/s (%.0f MB in %.2f s)"
      % (mbs, s["write"]["io_bytes"] / 1e6, s["job_runtime"] / 1e3))
print("fio 4 KiB write + fsync each: %d fsyncs, %.0f per s; fsync latency ms p50 %s p90 %s p99 %s (mean %.2f)"
      % (n, n / (f["job_runtime"] / 1e3) if f["job_runtime"] else 0, p("50.000000"), p("90.000000"),
         p("99.000000"), sync.get("mean", 0) / 1e6))
EOF
) || die "cannot read fio's JSON"
  {
    echo "slow device: $FS on $DEV (loop, image $IMG), mounted on $MNT; rule ($KIND): write ${WMBPS} MB/s, ${WIOPS} IOPS, read ${RMBPS} MB/s, ${RIOPS} IOPS (0 = none)"
    echo "$out"
    echo "calibrated $(date -u '+%Y-%m-%d %H:%M UTC'); host: ${host:-unknown CPU}, $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  } >"$STATE_DIR/calibration.txt"
  cat "$STATE_DIR/calibration.txt"
}

status() {
  load_state
  echo "$NAME: $FS on $DEV ($MAJMIN) at $MNT, rule ($KIND):"
  rule_present "$MAJMIN" || echo "  (no rule found)"
  [[ -r $STATE_DIR/calibration.txt ]] && cat "$STATE_DIR/calibration.txt"
  mountpoint -q "$MNT"
}

case $cmd in
  probe) probe; echo "slowdev: this machine can: loop, mkfs.$FS, throttle $(throttle_kind)" ;;
  up) up ;;
  down) down ;;
  calibrate) calibrate ;;
  status) status ;;
  calibration) load_state; cat "$STATE_DIR/calibration.txt" ;;
  env) load_state; cat "$STATE_DIR/env" ;;
  exec)
    load_state
    [[ ${#exec_cmd[@]} -gt 0 ]] || die "exec: give the command after --"
    if [[ $KIND == v2 ]]; then echo $$ >"$V2/cgroup.procs" || die "cannot enter $V2"; fi
    exec "${exec_cmd[@]}"
    ;;
  *) sed -n '2,28p' "$0"; exit 2 ;;
esac
