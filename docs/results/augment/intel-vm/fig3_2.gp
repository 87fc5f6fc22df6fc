set terminal pngcairo size 920,420 font ',10' noenhanced
set output 'fig3_2.png'
set multiplot layout 1,2 title 'Voluntary context switches (the runs of figure 3.1)'
set key top left font ',9'
set grid
set xlabel 'compute threads'
set ylabel 'voluntary context switches'
set logscale y
set title 'fixed'
set logscale x 2
plot for [i=2:4] 'fig3_2.fixed.dat' using 1:i with linespoints title columnheader(i)
unset logscale x
set title 'full'
set logscale x 2
plot for [i=2:4] 'fig3_2.full.dat' using 1:i with linespoints title columnheader(i)
unset logscale x
unset multiplot
