#!/usr/bin/env bash
# bench.sh: `make slowdev`. For each file system and write rate: set up the slow device
# (slowdev.sh up), calibrate it with fio, run tai-serial's bench and tai-augment on it, take it
# down; then summarise (summarize.py: speed-up over posix against the share of time posix spends
# in I/O, and the ceiling P / max(C, P - C)) and draw the figure with gnuplot.
#
#   bench.sh [--out DIR] [--build DIR] [--fs ext4,xfs] [--rates MBPS,...] [--repeats R]
#            [--size MIB] [--serial-args "..."] [--augment-args "..."] [--only serial|augment]
#
# Every table file starts with the calibration of the device it ran on. The device is taken down
# on any exit (trap), also when a run fails or the bench is interrupted.
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
S=$here/slowdev.sh
OUT=build/release/slowdev
BUILD=build/release
FSES=ext4
RATES=20
REPEATS=3
# tai-augment keeps every run's output (about 150 MB each here, 30 runs at 5 repeats): 4 GiB filled up.
SIZE_MIB=16384
ONLY=
NAME=tai-slowdev-bench
# The serial program on 60 of its default images (about 1.8 s of compute on a quiet core, several
# times that on a busy one) writing 160 MiB: at 20 MB/s about 8.4 s of device time.
SERIAL_ARGS="--images 60 --min-mib 160 --fsync-every 1,30"
# tai-augment: overwrite, fsync every 30, amplify 10, 100 images (about 150 MB), 1 and 2 threads.
AUGMENT_ARGS="--images 100 --amplify 10 --overwrite --fsync-every 30 --threads 1,2 --method posix,tai-triv,tai-def"
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --fs) FSES=$2; shift 2 ;;
    --rates) RATES=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --size) SIZE_MIB=$2; shift 2 ;;
    --serial-args) SERIAL_ARGS=$2; shift 2 ;;
    --augment-args) AUGMENT_ARGS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
  esac
done
SERIAL=$BUILD/workloads/serial/tai-serial
AUGMENT=$BUILD/workloads/augment/tai-augment
[[ -x $SERIAL || $ONLY == augment ]] || { echo "bench.sh: $SERIAL is not built"; exit 1; }
[[ -x $AUGMENT || $ONLY == serial ]] || { echo "bench.sh: $AUGMENT is not built"; exit 1; }
for fs in ${FSES//,/ }; do "$S" probe --fs "$fs" || exit $?; done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
trap '"$S" down --name "$NAME" >/dev/null' EXIT
trap 'exit 130' INT TERM

rc=0
for fs in ${FSES//,/ }; do
  for rate in ${RATES//,/ }; do
    tag=$fs-${rate}mbps
    "$S" up --name "$NAME" --fs "$fs" --wmbps "$rate" --size "$SIZE_MIB" || exit 1
    mnt=$("$S" env --name "$NAME" | sed -n 's/^MNT=//p')
    "$S" calibrate --name "$NAME" >"$OUT/calibration-$tag.txt" || exit 1
    cat "$OUT/calibration-$tag.txt"
    if [[ $ONLY != augment ]]; then
      # shellcheck disable=SC2086
      { cat "$OUT/calibration-$tag.txt"; echo;
        echo "\$ tai-serial bench $SERIAL_ARGS --repeats $REPEATS --output $mnt/serial";
        "$S" exec --name "$NAME" -- "$SERIAL" bench $SERIAL_ARGS --repeats "$REPEATS" \
          --output "$mnt/serial" --csv "$OUT/serial-$tag.csv"; } 2>&1 | tee "$OUT/serial-$tag.txt"
      [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "bench.sh: tai-serial bench failed on $tag"; rc=1; }
      rm -rf "$mnt/serial"
    fi
    if [[ $ONLY != serial ]]; then
      # shellcheck disable=SC2086
      { cat "$OUT/calibration-$tag.txt"; echo;
        echo "\$ tai-augment $AUGMENT_ARGS --repeat $REPEATS --output $mnt/augment";
        "$S" exec --name "$NAME" -- "$AUGMENT" $AUGMENT_ARGS --repeat "$REPEATS" \
          --output "$mnt/augment" --csv "$OUT/augment-$tag.csv"; } 2>&1 | tee "$OUT/augment-$tag.txt"
      [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "bench.sh: tai-augment failed on $tag"; rc=1; }
      rm -rf "$mnt/augment"
    fi
    "$S" down --name "$NAME" || rc=1
  done
done
python3 "$here/summarize.py" "$OUT" | tee "$OUT/summary.txt" || rc=1
if command -v gnuplot >/dev/null && [[ -s $OUT/points.dat ]]; then
  (cd "$OUT" && gnuplot slow-storage.gp) && echo "bench.sh: figure $OUT/slow-storage.png"
fi
exit $rc
