set terminal pngcairo size 920,420 font ',10' noenhanced
set output 'fig3_5.png'
set multiplot layout 1,2 title 'O_DIRECT overwrite, fsync every 300 writes (cstdio: buffered, for reference)'
set key top left font ',9'
set grid
set xlabel 'compute threads'
set ylabel 'MB/s of un-overwritten output'
set title 'fixed'
set logscale x 2
plot for [i=2:4] 'fig3_5.fixed.dat' using 1:i with linespoints title columnheader(i)
unset logscale x
set title 'full'
set logscale x 2
plot for [i=2:4] 'fig3_5.full.dat' using 1:i with linespoints title columnheader(i)
unset logscale x
unset multiplot
