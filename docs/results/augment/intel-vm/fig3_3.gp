set terminal pngcairo size 920,420 font ',10' noenhanced
set output 'fig3_3.png'
set multiplot layout 1,2 title 'Overwrite, fsync every 30 writes'
set key top left font ',9'
set grid
set xlabel 'compute threads'
set ylabel 'MB/s of un-overwritten output'
set title 'fixed'
set logscale x 2
plot for [i=2:4] 'fig3_3.fixed.dat' using 1:i with linespoints title columnheader(i)
unset logscale x
set title 'full'
set logscale x 2
plot for [i=2:4] 'fig3_3.full.dat' using 1:i with linespoints title columnheader(i)
unset logscale x
unset multiplot
