set terminal pngcairo size 460,420 font ',10' noenhanced
set output 'fig3_8_minor_faults.png'
set multiplot layout 1,1 title 'The runs of figure 3.1 (fixed load): minor_faults'
set key top left font ',9'
set grid
set xlabel 'compute threads'
set ylabel 'minor_faults'
set title 'fixed'
set logscale x 2
plot for [i=2:4] 'fig3_8_minor_faults.fixed.dat' using 1:i with linespoints title columnheader(i)
unset logscale x
unset multiplot
