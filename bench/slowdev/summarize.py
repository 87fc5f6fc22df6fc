#!/usr/bin/env python3
"""Summarises a `make slowdev` output directory (bench/slowdev/bench.sh).

Reads serial-<tag>.csv (tai-serial bench) and augment-<tag>.csv (tai-augment, one row per run) and
calibration-<tag>.txt, prints per tag the speed-up of every mode over posix next to the share of
time posix spends in I/O and the ceiling no overlap can beat, and checks the slow-profile targets
(tai-def >= 1.4x posix at 1 and 2 threads; async serial >= 1.5x and >= 85 % of the ceiling;
drop-in >= 1.3x). Writes points.dat and slow-storage.gp (gnuplot) for the figure: speed-up against
posix's I/O share s, with the ceiling 1 / max(1 - s, s) = P / max(C, P - C) as the line.

The ceiling columns are the lower of that line and the device's own time: the bytes posix sent
to the device at the throttle rule's rate (fio's when there is no rule) (a run cannot end before the device has written them;
at 2 compute threads the device, not the overlap, is what bounds the speed-up).

posix's I/O share is measured inside posix's own runs: its time in open/pwrite/fsync/close over
its wall time (tai-serial's "in I/O s" / "wall s"; tai-augment's io_s / (threads x wall_s)). The
serial bench's own ceiling row, from a separate compute-only run, is printed beside it: on a busy
machine the two runs see different CPU shares, and the in-run figure does not depend on that.
"""
import csv
import glob
import os
import statistics
import sys


def ceiling(share):
    return 1.0 / max(1.0 - share, share) if 0.0 <= share < 1.0 else float("nan")


def device_mbps(calibration_text):
    """The device's write rate, MB/s: the throttle rule's when there is one (no run can write
    faster than the rule allows; fio's figure includes its final fsync and is a little lower),
    else fio's streaming rate (1 MiB requests); None when neither is given."""
    for line in calibration_text.splitlines():
        if "rule" in line and "write" in line and "MB/s" in line:
            try:
                rate = float(line.split("write", 1)[1].split("MB/s")[0])
                if rate > 0:
                    return rate
            except ValueError:
                pass
    for line in calibration_text.splitlines():
        if line.startswith("fio write") and "MB/s" in line:
            try:
                return float(line.split(":", 1)[1].split("MB/s")[0])
            except ValueError:
                return None
    return None


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def main(out):
    tags = sorted(os.path.basename(p)[len("calibration-"):-len(".txt")]
                  for p in glob.glob(os.path.join(out, "calibration-*.txt")))
    points = []
    verdicts = []
    device_bound = []
    for tag in tags:
        print("=" * 100)
        calibration = open(os.path.join(out, "calibration-%s.txt" % tag)).read()
        print(calibration.rstrip())
        mbps = device_mbps(calibration)
        scsv = os.path.join(out, "serial-%s.csv" % tag)
        if os.path.exists(scsv):
            rows = list(csv.DictReader(open(scsv)))
            print("\ntai-serial (medians of the repeats; speed-up = posix wall / mode wall)")
            print("fsync every  posix wall s  posix in I/O  drop-in  preload  async  ceiling(in-run, device)"
                  "  ceiling(compute-only run)  async/ceiling")
            for f in sorted({r["fsync_every"] for r in rows}, key=lambda x: int(x)):
                by = {r["mode"]: r for r in rows if r["fsync_every"] == f}
                p = by.get("posix")
                if not p:
                    continue
                pw, pio = num(p["wall_s_median"]), num(p["io_s_median"])
                share = pio / pw if pw else float("nan")
                # The device alone needs the written bytes at the calibrated rate: no overlap makes
                # a run shorter than that, so the ceiling is the lower of the two.
                mb = num(p.get("mb_written"))
                if mbps and mb:
                    device_s = mb * 1.048576 / mbps
                    device_bound.append("tai-serial fsync every %s: the device needs %.2f s for %.0f MB at %.1f MB/s:"
                                        " at most %.2fx posix (in-run ceiling %.2fx)"
                                        % (f, device_s, mb * 1.048576, mbps, pw / device_s, ceiling(share)))
                ceil = min(ceiling(share), pw / device_s) if mbps and mb else ceiling(share)
                sp = {}
                for m in ("drop-in", "preload", "async"):
                    w = num(by[m]["wall_s_median"]) if m in by else None
                    sp[m] = pw / w if w else None
                    if sp[m]:
                        points.append((share, sp[m], "serial %s f%s %s" % (m, f, tag), "f%s %s" % (f, tag.split("-")[0])))
                bench_ceil = num(by["ceiling"]["speedup_vs_posix"]) if "ceiling" in by else None
                share_of = sp["async"] / ceil if sp["async"] else None
                fmt = lambda v: "%5.2fx" % v if v else "   - "
                print("%11s  %12.2f  %11.0f%%  %7s  %7s  %5s  %22.2fx  %25s  %12s"
                      % (f, pw, 100 * share, fmt(sp["drop-in"]), fmt(sp["preload"]), fmt(sp["async"]), ceil,
                         ("%.2fx" % bench_ceil) if bench_ceil else "-",
                         ("%.0f%%" % (100 * share_of)) if share_of else "-"))
                band = "in" if 0.30 <= share <= 0.60 else "OUTSIDE"
                if sp["async"]:
                    verdicts.append(("async serial >= 1.5x (fsync every %s, %s; posix I/O %.0f%%, %s the band)"
                                     % (f, tag, 100 * share, band), sp["async"] >= 1.5, "%.2fx" % sp["async"]))
                    verdicts.append(("async serial >= 85%% of the ceiling (fsync every %s, %s)" % (f, tag),
                                     share_of >= 0.85, "%.0f%% of %.2fx" % (100 * share_of, ceil)))
                if sp["drop-in"]:
                    verdicts.append(("drop-in >= 1.3x (fsync every %s, %s)" % (f, tag), sp["drop-in"] >= 1.3,
                                     "%.2fx" % sp["drop-in"]))
        acsv = os.path.join(out, "augment-%s.csv" % tag)
        if os.path.exists(acsv):
            runs = [r for r in csv.DictReader(open(acsv)) if num(r.get("wall_s"))]
            print("\ntai-augment (medians of the repeats; speed-up = posix median wall / method median wall)")
            print("threads  method     runs  median wall s  in I/O  vs posix  ceiling  share of ceiling")
            for t in sorted({int(r["threads"]) for r in runs}):
                walls, shares = {}, []
                for r in runs:
                    if int(r["threads"]) != t:
                        continue
                    walls.setdefault(r["method"], []).append(num(r["wall_s"]))
                    if r["method"] == "posix" and num(r.get("io_s")) is not None:
                        shares.append(num(r["io_s"]) / (t * num(r["wall_s"])))
                if "posix" not in walls:
                    continue
                pw = statistics.median(walls["posix"])
                share = statistics.median(shares) if shares else float("nan")
                ceil = ceiling(share)
                dev_cap = None
                dev = [num(r.get("device_write_bytes")) for r in runs
                       if int(r["threads"]) == t and r["method"] == "posix" and num(r.get("device_write_bytes"))]
                if mbps and dev:
                    device_s = statistics.median(dev) / 1e6 / mbps
                    device_bound.append("tai-augment %d thread(s): the device needs %.2f s for posix's %.0f MB at %.1f MB/s:"
                                        " at most %.2fx posix (in-run ceiling %.2fx)"
                                        % (t, device_s, statistics.median(dev) / 1e6, mbps, pw / device_s, ceil))
                    dev_cap = pw / device_s
                    ceil = min(ceil, dev_cap)
                for m, ws in walls.items():
                    w = statistics.median(ws)
                    r_io = [num(r["io_s"]) / (t * num(r["wall_s"])) for r in runs
                            if int(r["threads"]) == t and r["method"] == m and num(r.get("io_s")) is not None]
                    sp = pw / w
                    print("%7d  %-9s  %4d  %13.2f  %5.0f%%  %7.2fx  %6.2fx  %15.0f%%"
                          % (t, m, len(ws), w, 100 * statistics.median(r_io) if r_io else float("nan"), sp, ceil,
                             100 * sp / ceil))
                    if m != "posix":
                        points.append((share, sp, "augment %s %dt %s" % (m, t, tag), "%dt %s" % (t, tag.split("-")[0])))
                    if m == "tai-def":
                        band = "in" if 0.30 <= share <= 0.60 else "OUTSIDE"
                        cap = ("; the device allows at most %.2fx" % dev_cap) if dev_cap and dev_cap < 1.4 else ""
                        verdicts.append(("tai-def >= 1.4x posix at %d thread(s) (%s; posix I/O %.0f%%, %s the band%s)"
                                         % (t, tag, 100 * share, band, cap), sp >= 1.4, "%.2fx" % sp))
    print("=" * 100)
    if device_bound:
        print("the device's own time (bytes sent to it at the rule's rate; the ceiling columns use the lower bound):")
        for line in device_bound:
            print("  " + line)
    print("targets on the slow profile:")
    for what, ok, got in verdicts:
        print("  %-4s %s: %s" % ("met" if ok else "MISS", what, got))
    with open(os.path.join(out, "points.dat"), "w") as f:
        f.write("# posix I/O share, speed-up over posix, what, short label (fsync every F or T threads, file system)\n")
        for share, sp, what, short in points:
            f.write('%.4f %.4f "%s" "%s"\n' % (share, sp, what, short))
    # Point styles per family: serial drop-in/preload/async, augment tai-triv/tai-def.
    with open(os.path.join(out, "slow-storage.gp"), "w") as f:
        f.write("""# Generated by bench/slowdev/summarize.py; re-run with: gnuplot slow-storage.gp (in this directory)
set terminal pngcairo size 1000,700 font ',10'
set output 'slow-storage.png'
set title "Speed-up over posix on the throttled loop device, against the share of time posix spends in I/O\\n(AMD EPYC, 2 vCPU VM, shared with other builds; line: the ceiling P / max(C, P - C))"
set xlabel "posix's time in I/O, share of its wall time (s)"
set ylabel "speed-up over posix (median wall time)"
set xrange [0:100]
set yrange [0:2.2]
set grid
set key top right
set format x '%.0f%%'
roof(s) = 1.0 / (1.0 - s > s ? 1.0 - s : s)
set samples 400
dat = 'points.dat'
plot roof(x / 100.0) with lines lw 2 lc rgb '#444444' title 'ceiling 1 / max(1 - s, s)', \\
     1 with lines dt 2 lc rgb '#888888' title 'posix', \\
     dat using ($1*100):(strstrt(stringcolumn(3), 'serial drop-in') ? $2 : 1/0) with points pt 7 ps 1.4 title 'tai-serial drop-in', \\
     dat using ($1*100):(strstrt(stringcolumn(3), 'serial preload') ? $2 : 1/0) with points pt 5 ps 1.4 title 'tai-serial preload', \\
     dat using ($1*100):(strstrt(stringcolumn(3), 'serial async') ? $2 : 1/0) with points pt 9 ps 1.6 title 'tai-serial async (File API)', \\
     dat using ($1*100):(strstrt(stringcolumn(3), 'augment tai-triv') ? $2 : 1/0) with points pt 11 ps 1.6 title 'tai-augment tai-triv', \\
     dat using ($1*100):(strstrt(stringcolumn(3), 'augment tai-def') ? $2 : 1/0) with points pt 13 ps 1.6 title 'tai-augment tai-def', \\
     dat using ($1*100):2:4 with labels left offset 1,0 font ',7' notitle
""")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
