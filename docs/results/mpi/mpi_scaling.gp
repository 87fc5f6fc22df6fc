# Weak-scaling efficiency of tai-augment --mpi (mpi_scaling.py); run in this directory.
set terminal pngcairo size 800,500
set output 'mpi_weak_efficiency.png'
set title "tai-augment --mpi, weak scaling (150 images per rank, 1 OpenMP thread per rank)\n2-core VM: 4 ranks oversubscribe the 2 cores"
set xlabel 'ranks'
set ylabel 'efficiency = throughput(N) / (N x throughput(1))'
set xtics (1, 2, 4)
set yrange [0:1.2]
set key bottom left
set grid
plot 'mpi_weak.dat' using 1:(strcol(2) eq 'posix' ? $6 : 1/0) with linespoints title 'posix', 'mpi_weak.dat' using 1:(strcol(2) eq 'tai-def' ? $6 : 1/0) with linespoints title 'tai-def', 0.9 with lines dashtype 2 title 'target at 2 ranks (0.9)'
