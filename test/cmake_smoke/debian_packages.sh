#!/usr/bin/env bash
# cmake_smoke.debian_packages: the Debian packages of this build serve a consumer.
#   debian_packages.sh BINARY_DIR WORK_DIR -- <the cmake_smoke run.cmake arguments>
# 1. cpack (cmake/TaiPackage.cmake) makes the .debs of BINARY_DIR into WORK_DIR/debs;
# 2. each is unpacked (dpkg-deb -x) into the empty root WORK_DIR/root;
# 3. the cmake_smoke consumer is built against WORK_DIR/root/usr with find_package(tai) and with
#    pkg-config (run.cmake's package and pkgconfig steps, PREFIX=WORK_DIR/root/usr) and run;
# 4. the tools package's programs and preload library are there and start;
# 5. lintian checks every package and must report no error (warnings are printed).
# Exit 77 (skip) when dpkg-deb or lintian is missing, with the reason.
set -euo pipefail
binary_dir=$1 work=$2
shift 3  # BINARY_DIR WORK_DIR --
for tool in cpack dpkg-deb lintian dpkg-shlibdeps; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "SKIP: $tool is not installed (make deps installs it)"; exit 77
  fi
done
rm -rf "$work" && mkdir -p "$work/debs" "$work/root"
cpack_config="$binary_dir/CPackConfig.cmake"
[ -f "$cpack_config" ] || { echo "no $cpack_config: was the build configured with TAI_INSTALL?"; exit 1; }
t0=$(date +%s)
( cd "$work" && timeout 600 cpack --config "$cpack_config" -B "$work/debs" ) > "$work/cpack.log" 2>&1 ||
  { cat "$work/cpack.log"; echo "cpack failed"; exit 1; }
mapfile -t debs < <(find "$work/debs" -maxdepth 1 -name '*.deb' | sort)
names=$(for d in "${debs[@]}"; do dpkg-deb -f "$d" Package; done | tr '\n' ' ')
echo "packages: $names (cpack: $(( $(date +%s) - t0 )) s)"
for want in libtai-dev tai-tools; do
  case " $names " in *" $want "*) ;; *) echo "missing package $want (made: $names)"; exit 1;; esac
done
for d in "${debs[@]}"; do
  echo "== $(basename "$d")"; dpkg-deb -f "$d" Package Version Architecture Depends
  dpkg-deb -x "$d" "$work/root"
done

# The consumer, as on a machine where only these packages put TAI: find_package and pkg-config.
timeout 600 cmake "$@" -DSTEP=package -DPREFIX="$work/root/usr" -DWORK_DIR="$work/package" \
  -P "$(dirname "$0")/run.cmake"
timeout 600 cmake "$@" -DSTEP=pkgconfig -DPREFIX="$work/root/usr" -DWORK_DIR="$work/pkgconfig" \
  -P "$(dirname "$0")/run.cmake"

# The tools: each program answers --help; the preload library loads into a program.
for program in tai-bench tai-augment tai-serial; do
  if [ -x "$binary_dir/bench/$program" ] || [ -x "$binary_dir/workloads/augment/$program" ] ||
     [ -x "$binary_dir/workloads/serial/$program" ]; then
    [ -x "$work/root/usr/bin/$program" ] || { echo "tai-tools lacks usr/bin/$program"; exit 1; }
    timeout 60 "$work/root/usr/bin/$program" --help > /dev/null || { echo "$program --help failed"; exit 1; }
  fi
done
preload=$(find "$work/root/usr" -name libtai-preload.so | head -1)
if [ -f "$binary_dir/src/preload/libtai-preload.so" ]; then
  [ -n "$preload" ] || { echo "tai-tools lacks libtai-preload.so"; exit 1; }
  out=$(LD_PRELOAD="$preload" timeout 60 /bin/echo preloaded) || { echo "the packaged preload library does not load"; exit 1; }
  [ "$out" = preloaded ] || { echo "echo under the packaged preload library printed '$out'"; exit 1; }
fi

# lintian: errors fail the test, everything else is shown.
t0=$(date +%s)
status=0
for d in "${debs[@]}"; do
  report=$(timeout 600 lintian --tag-display-limit 0 "$d" 2>&1 || true)
  [ -n "$report" ] && printf '%s\n' "$report"
  if printf '%s\n' "$report" | grep -q '^E: '; then
    echo "lintian reports errors for $(basename "$d")"; status=1
  fi
done
echo "lintian: $(( $(date +%s) - t0 )) s"
[ $status -eq 0 ] && echo "debian packages ok: ${#debs[@]} packages, consumer built with find_package and pkg-config"
exit $status
