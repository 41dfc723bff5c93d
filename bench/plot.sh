#!/usr/bin/env bash
# Draws the benchmark's figures from a bench.sh output directory into one PNG:
# drain throughput over time, throughput per 10% of the growth run, and the relay's
# commit -> acknowledgement latency distribution at 2,000 events/s.
#   bench/plot.sh OUT_DIR PNG
set -euo pipefail
dir=$1 png=$2
awk 'NR > 1 && $1 > t { printf "%.2f %.0f\n", $1 - t0, ($2 - m) / ($1 - t) } NR == 1 { t0 = $1 } { t = $1; m = $2 }' \
    "$dir/drain-1.tsv" >"$dir/drain-rate.dat"
awk '{ print $1 * 10, $2 }' "$dir/growth.txt" >"$dir/growth.dat"
awk 'FNR == NR && /^outbox_event_latency_seconds_bucket/ { match($0, /le="[^"]*"/); b[substr($0, RSTART + 4, RLENGTH - 5)] = $2; next }
     /^outbox_event_latency_seconds_bucket/ { match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5)
         if (le == "+Inf") next; c = $2 - b[le]; printf "%.1f %d\n", le * 1000, c - prev; prev = c }' \
    "$dir/metrics-before-1.txt" "$dir/metrics-after-1.txt" | awk '$1 <= 100' >"$dir/latency.dat"
gnuplot <<GP
set terminal pngcairo size 1500,450 font "DejaVu Sans,10"
set output "$png"
set multiplot layout 1,3
set grid
set title "Drain of the backlog (1 relay)"
set xlabel "seconds"; set ylabel "events/s"
plot "$dir/drain-rate.dat" using 1:2 with lines lw 2 notitle
set title "Growth: drain throughput per 10% of the events"
set xlabel "% of events written through the table"; set ylabel "events/s"
set yrange [0:*]
plot "$dir/growth.dat" using 1:2 with linespoints lw 2 pt 7 notitle
set title "Latency at 2,000 events/s (commit -> Kafka ack)"
set xlabel "ms (bucket upper bound)"; set ylabel "events"
set style fill solid 0.6
set logscale x
plot "$dir/latency.dat" using 1:2 with impulses lw 6 notitle
unset multiplot
GP
