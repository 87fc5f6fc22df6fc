# Shared by the preload benchmarks in this directory (sourced, not run).

# The median of the numbers on stdin, separated by spaces or newlines (the mean of the middle two
# when their count is even).
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# The host line each benchmark prints with its table: the CPU model (the same code differs up to
# 2x between hosts), the CPU count and the load average.
host_line() { echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"; }
