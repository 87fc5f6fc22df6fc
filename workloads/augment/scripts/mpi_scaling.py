#!/usr/bin/env python3
"""Weak and strong scaling of tai-augment --mpi: ranks 1, 2, 4 (by default), TAI against posix
inside each rank, methods interleaved (their order rotates every repeat), medians.

Weak scaling holds the work per rank fixed (--images-per-rank): efficiency(N) =
throughput(N) / (N x throughput(1)). Strong scaling holds the total fixed (the same number of
images as one rank's weak share): speed-up(N) = throughput(N) / throughput(1). Throughput is the
job's, measured as IOR does: images (or bytes) / (latest end - earliest start over the ranks),
each rank's final fsync inside. Writes, into --out: mpi_weak.dat, mpi_strong.dat, mpi_scaling.gp,
mpi_weak_efficiency.png (gnuplot), results.md (tables, the exact commands, the machine's load).

    python3 workloads/augment/scripts/mpi_scaling.py --program build/release/workloads/augment/tai-augment \\
        --out docs/results/mpi --repeats 3 --images-per-rank 200
"""
import argparse
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def launcher_flags():
    """The one place the mpirun flags live: workloads/augment/mpirun-flags."""
    with open(os.path.join(HERE, "..", "mpirun-flags")) as f:
        return shlex.split(" ".join(line for line in f if not line.startswith("#")))


def uptime():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run_job(args, ranks, methods, images, per_rank, log):
    cmd = (["mpirun"] + launcher_flags() + ["-np", str(ranks), args.program, "--mpi", "--threads", str(args.threads),
            "--images", str(images), "--method", ",".join(methods), "--output", args.work] +
           (["--images-per-rank"] if per_rank else []) + shlex.split(args.extra))
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=args.deadline)
    log.write("$ " + " ".join(shlex.quote(c) for c in cmd) + f"\n# load before/after: see results.md; {time.time() - t0:.1f} s\n")
    log.write(p.stdout + "\n")
    log.flush()
    if p.returncode != 0:
        sys.exit(f"mpi_scaling: the job failed (exit {p.returncode}):\n{p.stdout[-3000:]}")
    results = {}
    for line in p.stdout.splitlines():
        if line.startswith("mpi-result:"):
            fields = dict(kv.split("=", 1) for kv in line.split()[1:])
            if fields.get("ok") != "1":
                sys.exit("mpi_scaling: a run did not verify: " + line)
            results[fields["method"]] = fields
    for m in methods:
        if m not in results:
            sys.exit(f"mpi_scaling: no result line for {m}:\n{p.stdout[-3000:]}")
    return results, cmd


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--program", required=True)
    ap.add_argument("--out", default="docs/results/mpi")
    ap.add_argument("--work", default="build/release/mpi-scaling")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--methods", default="posix,tai-def")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--images-per-rank", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1, help="OpenMP threads per rank (1: one rank per core)")
    ap.add_argument("--extra", default="", help="more tai-augment options for every run")
    ap.add_argument("--deadline", type=float, default=900)
    args = ap.parse_args()
    ranks = [int(r) for r in args.ranks.split(",")]
    methods = args.methods.split(",")
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.work, exist_ok=True)
    weak = {}    # (ranks, method) -> [result fields]
    strong = {}
    load_before = uptime()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    commands = []
    with open(os.path.join(args.work, "mpi_scaling.log"), "w") as log:
        for rep in range(args.repeats):
            order = methods[rep % len(methods):] + methods[:rep % len(methods)]
            for n in ranks[rep % len(ranks):] + ranks[:rep % len(ranks)]:
                res, cmd = run_job(args, n, order, args.images_per_rank, True, log)
                commands.append(cmd)
                for m in methods:
                    weak.setdefault((n, m), []).append(res[m])
                if n == 1:  # one rank: the strong-scaling point is the same run
                    for m in methods:
                        strong.setdefault((n, m), []).append(res[m])
                else:
                    res, cmd = run_job(args, n, order, args.images_per_rank, False, log)
                    commands.append(cmd)
                    for m in methods:
                        strong.setdefault((n, m), []).append(res[m])
                print(f"repeat {rep + 1}/{args.repeats}, {n} rank(s): done (load {uptime()})", flush=True)
    load_after = uptime()

    def med(rows, key):
        return statistics.median(float(r[key]) for r in rows)

    def cpu(rows):  # each rank's CPU time / wall time, median over ranks then over repeats
        return f"{med(rows, 'cpu_per_wall'):.2f}" if all("cpu_per_wall" in r for r in rows) else "n/a"

    base = {m: med(weak[(1, m)], "images_per_s") for m in methods}
    lines_weak = ["# ranks method per_rank_images_per_s images_per_s mb_per_s efficiency ready_s durable_ms_max runs"]
    table_weak = ["| ranks | method | images/s per rank | images/s (job) | MB/s (job) | weak efficiency | time to ready s | last write to fsync done, max ms | CPU/wall per rank |",
                  "|---|---|---|---|---|---|---|---|---|"]
    for n in ranks:
        for m in methods:
            rows = weak[(n, m)]
            ips = med(rows, "images_per_s")
            eff = ips / (n * base[m])
            lines_weak.append(f"{n} {m} {ips / n:.3f} {ips:.3f} {med(rows, 'mb_per_s'):.3f} {eff:.4f} "
                              f"{med(rows, 'ready_s'):.3f} {med(rows, 'durable_ms_max'):.1f} {len(rows)}")
            table_weak.append(f"| {n}{' (oversubscribed: 4 ranks on 2 cores)' if n > os.cpu_count() else ''} | {m} | "
                              f"{ips / n:.2f} | {ips:.2f} | {med(rows, 'mb_per_s'):.2f} | {eff:.3f} | "
                              f"{med(rows, 'ready_s'):.2f} | {med(rows, 'durable_ms_max'):.1f} | {cpu(rows)} |")
    lines_strong = ["# ranks method images_per_s mb_per_s speedup seconds runs"]
    table_strong = ["| ranks | method | images/s (job) | MB/s (job) | speed-up | seconds |", "|---|---|---|---|---|---|"]
    for n in ranks:
        for m in methods:
            rows = strong[(n, m)]
            ips = med(rows, "images_per_s")
            lines_strong.append(f"{n} {m} {ips:.3f} {med(rows, 'mb_per_s'):.3f} {ips / base[m]:.4f} {med(rows, 'seconds'):.3f} {len(rows)}")
            table_strong.append(f"| {n} | {m} | {ips:.2f} | {med(rows, 'mb_per_s'):.2f} | {ips / base[m]:.3f} | {med(rows, 'seconds'):.2f} |")
    with open(os.path.join(args.out, "mpi_weak.dat"), "w") as f:
        f.write("\n".join(lines_weak) + "\n")
    with open(os.path.join(args.out, "mpi_strong.dat"), "w") as f:
        f.write("\n".join(lines_strong) + "\n")
    # One series per method (a filter on the method column, so the lines join that method's points).
    plots = ", ".join(f"'< grep -w {m} mpi_weak.dat' using 1:6 with linespoints lw 2 title '{m}'" for m in methods)
    gp = f"""# Weak-scaling efficiency of tai-augment --mpi (mpi_scaling.py); run in this directory.
set terminal pngcairo size 900,520
set output 'mpi_weak_efficiency.png'
set title "tai-augment --mpi, weak scaling ({args.images_per_rank} images per rank, {args.threads} OpenMP thread per rank)\\n2-core VM, load average {load_before} before, {load_after} after (other engineers' work)\\n4 ranks oversubscribe the 2 cores"
set xlabel 'ranks'
set ylabel 'efficiency = throughput(N) / (N x throughput(1))'
set xtics ({', '.join(str(n) for n in ranks)})
set yrange [0:1.2]
set key bottom left
set grid
plot {plots}, 0.9 with lines dashtype 2 title 'target at 2 ranks (0.9)'
"""
    with open(os.path.join(args.out, "mpi_scaling.gp"), "w") as f:
        f.write(gp)
    drawn = "not drawn: gnuplot is not installed"
    if shutil.which("gnuplot"):
        subprocess.run(["gnuplot", "mpi_scaling.gp"], cwd=args.out, check=True)
        drawn = "mpi_weak_efficiency.png"
    me = " ".join(shlex.quote(a) for a in sys.argv)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(f"""# tai-augment --mpi: weak and strong scaling

Made by `{me}` ({started}; load average before {load_before}, after {load_after}; the machine is a
2-core VM shared with other engineers' builds and tests, so the load is part of the measurement).
Medians of {args.repeats} repeats; methods run inside the same mpirun, their order rotating each
repeat. Throughput is the job's, as IOR measures it: images (or bytes) / (latest end - earliest start
over the ranks), each rank's final fsync inside. One OpenMP thread per rank, TAI with 2 workers per
rank; Open MPI's default binding (1 and 2 ranks: each rank bound to one core, so TAI's workers share
their rank's core; 4 ranks oversubscribe the 2 cores and are not bound).

## Weak scaling ({args.images_per_rank} images per rank) — figure: {drawn}

{chr(10).join(table_weak)}

## Strong scaling ({args.images_per_rank} images in all)

{chr(10).join(table_strong)}

Each job's command (the first repeat's):

```
{chr(10).join(" ".join(shlex.quote(c) for c in cmd) for cmd in commands[:2 * len(ranks) - 1])}
```
""")
    print(open(os.path.join(args.out, "results.md")).read())


if __name__ == "__main__":
    main()
