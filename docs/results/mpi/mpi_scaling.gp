# Weak-scaling efficiency of tai-augment --mpi (mpi_scaling.py); run in this directory.
set terminal pngcairo size 900,520
set output 'mpi_weak_efficiency.png'
set title "tai-augment --mpi, weak scaling (150 images per rank, 1 OpenMP thread per rank)\n2-core VM, load average 1.22 2.15 2.81 before, 2.37 2.44 2.78 after (other engineers' work)\n4 ranks oversubscribe the 2 cores"
set xlabel 'ranks'
set ylabel 'efficiency = throughput(N) / (N x throughput(1))'
set xtics (1, 2, 4)
set yrange [0:1.2]
set key bottom left
set grid
plot '< grep -w posix mpi_weak.dat' using 1:6 with linespoints lw 2 title 'posix', '< grep -w tai-def mpi_weak.dat' using 1:6 with linespoints lw 2 title 'tai-def', 0.9 with lines dashtype 2 title 'target at 2 ranks (0.9)'
