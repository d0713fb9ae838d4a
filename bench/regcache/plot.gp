# Latency of a cache hit (get + put) against the number of cached regions,
# peerdma vs UCX ucs_rcache, from bench_regcache --dat.
# usage: gnuplot -e "datafile='regcache.dat'; outfile='regcache.png'" plot.gp
if (!exists("datafile")) datafile = 'regcache.dat'
if (!exists("outfile")) outfile = 'regcache.png'
set terminal pngcairo size 1000,620 noenhanced font ",11"
set output outfile
set title "Registration cache hit latency (get + put), median of repetitions"
set xlabel "cached regions"
set ylabel "ns per get+put (per thread)"
set logscale x
set logscale y
set xrange [700:140000]
set grid
set key top left
set style line 1 lc rgb '#1f77b4' lw 2 pt 7
set style line 2 lc rgb '#d62728' lw 2 pt 5
plot datafile using 1:2 with linespoints ls 1 title 'peerdma random, 1 thread', \
     datafile using 1:3 with linespoints ls 2 title 'UCX random, 1 thread', \
     datafile using 1:4 with linespoints ls 1 dt 2 pt 6 title 'peerdma sequential, 1 thread', \
     datafile using 1:5 with linespoints ls 2 dt 2 pt 4 title 'UCX sequential, 1 thread', \
     datafile using 1:6 with linespoints ls 1 dt 3 pt 9 title 'peerdma random, N threads', \
     datafile using 1:7 with linespoints ls 2 dt 3 pt 11 title 'UCX random, N threads'
