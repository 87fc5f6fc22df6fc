# Shared by the preload benchmarks in this directory (sourced, not run).

# The median of the numbers on stdin, separated by spaces or newlines (the mean of the middle two
# when their count is even).
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
