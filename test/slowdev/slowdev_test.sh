#!/usr/bin/env bash
# slowdev_test.sh: bench/slowdev/slowdev.sh really throttles, and `down` leaves nothing behind.
# Sets up a small (320 MiB: XFS's minimum is 300) ext4 (or SLOWDEV_TEST_FS) at a 20 MB/s write rule, writes 48 MB with
# `dd conv=fsync` (bypassing nothing: the page cache in between, as the workloads write), and
# checks that it took at least 0.8x the time the rule allows (48/20 = 2.4 s: >= 1.9 s) and was
# not absurdly slower (<= 4x). Then `down`, twice (idempotent), and checks that no loop device is
# backed by the image, nothing is mounted on the mount point and no rule names the device.
# Exit 77 with the reason where the machine refuses: not root, no loop device, no mkfs, no
# throttle. Each command runs under `timeout`.
set -u -o pipefail

SCRIPT=${SLOWDEV_SCRIPT:-$(cd "$(dirname "$0")/../.." && pwd)/bench/slowdev/slowdev.sh}
FS=${SLOWDEV_TEST_FS:-ext4}
NAME=tai-slowdev-test-$$
MNT=/tmp/$NAME.mnt
RATE=20   # MB/s
MB=48
fail() { echo "FAIL: $*"; timeout 60 bash "$SCRIPT" down --name "$NAME" --mnt "$MNT" >/dev/null 2>&1; exit 1; }

out=$(timeout 20 bash "$SCRIPT" probe --fs "$FS" 2>&1)
rc=$?
if [[ $rc -eq 77 ]]; then echo "SKIP: $out"; exit 77; fi
[[ $rc -eq 0 ]] || fail "probe: rc $rc: $out"

trap 'timeout 60 bash "$SCRIPT" down --name "$NAME" --mnt "$MNT" >/dev/null 2>&1' EXIT
out=$(timeout 60 bash "$SCRIPT" up --name "$NAME" --mnt "$MNT" --fs "$FS" --size 320 --wmbps "$RATE" 2>&1)
rc=$?
if [[ $rc -ne 0 ]]; then
  # A machine that offers the parts but refuses them at use (a container without loop devices,
  # a mount denied by policy) skips with what it said.
  if grep -qiE "permission denied|operation not permitted|could not find any free loop|failed to set up loop|read-only file system" <<<"$out"; then
    echo "SKIP: slowdev up refused: $out"; exit 77
  fi
  fail "up: rc $rc: $out"
fi
echo "$out"
env_out=$(bash "$SCRIPT" env --name "$NAME") || fail "no state after up"
dev=$(sed -n 's/^DEV=//p' <<<"$env_out")
majmin=$(sed -n 's/^MAJMIN=//p' <<<"$env_out")
kind=$(sed -n 's/^KIND=//p' <<<"$env_out")
img=$(sed -n 's/^IMG=//p' <<<"$env_out")
mountpoint -q "$MNT" || fail "up did not mount $MNT"
st=$(bash "$SCRIPT" status --name "$NAME" --mnt "$MNT") || fail "status: $st"
grep -q "^/sys.*: $majmin \|io.max: $majmin " <<<"$st" || fail "status names no rule for $majmin: $st"

start=$(date +%s.%N)
timeout 60 bash "$SCRIPT" exec --name "$NAME" --mnt "$MNT" -- \
  dd if=/dev/zero of="$MNT/probe" bs=1M count=$MB conv=fsync status=none || fail "dd on $MNT failed"
end=$(date +%s.%N)
secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
expected=$(awk -v mb=$MB -v r=$RATE 'BEGIN { printf "%.2f", mb / r }')
echo "dd conv=fsync of $MB MB under a $RATE MB/s rule ($kind, $dev $majmin): $secs s (the rule allows $expected s)"
awk -v s="$secs" -v e="$expected" 'BEGIN { exit !(s >= 0.8 * e) }' ||
  fail "not throttled: $secs s < 0.8 x $expected s"
awk -v s="$secs" -v e="$expected" 'BEGIN { exit !(s <= 4 * e) }' ||
  fail "far slower than the rule: $secs s > 4 x $expected s"

timeout 60 bash "$SCRIPT" down --name "$NAME" --mnt "$MNT" || fail "down failed"
timeout 60 bash "$SCRIPT" down --name "$NAME" --mnt "$MNT" || fail "a second down failed (not idempotent)"
trap - EXIT
left=""
if losetup -a 2>/dev/null | grep -qF "$img"; then left+=" loop device backed by $img;"; fi
if [[ -b $dev ]] && losetup -n -O BACK-FILE "$dev" 2>/dev/null | grep -qF "$img"; then left+=" $dev still attached;"; fi
if grep -qF " $MNT " /proc/mounts; then left+=" $MNT mounted;"; fi
for f in /sys/fs/cgroup/blkio/blkio.throttle.{write,read}_{bps,iops}_device; do
  [[ -r $f ]] && grep -q "^$majmin " "$f" && left+=" rule in $f;"
done
v2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
[[ -n $v2 && -d $v2/$NAME ]] && left+=" cgroup $v2/$NAME;"
[[ -e $img ]] && left+=" image $img;"
[[ -z $left ]] || { echo "FAIL: down left:$left"; exit 1; }
echo "down left no loop device, mount, rule or image behind"
