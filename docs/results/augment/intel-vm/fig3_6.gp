set terminal pngcairo size 920,420 font ',10' noenhanced
set output 'fig3_6.png'
set multiplot layout 1,2 title 'Single thread: throughput vs fsync frequency'
set key top left font ',9'
set grid
set xlabel 'fsync every N writes'
set ylabel 'MB/s of un-overwritten output'
set title 'buffered'
plot for [i=2:4] 'fig3_6.buffered.dat' using 0:i:xtic(1) with linespoints title columnheader(i)
set title 'direct'
plot for [i=2:4] 'fig3_6.direct.dat' using 0:i:xtic(1) with linespoints title columnheader(i)
unset multiplot
