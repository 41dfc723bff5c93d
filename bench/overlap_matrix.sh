#!/usr/bin/env bash
# bench/overlap.sh over a matrix: each configuration one run of S seconds (default 600) with
# its own servers, one after the other (about S + 60 s each), then a markdown table of the
# figures the issue's targets name (pending under two seconds of writes, claims from the
# bottom at most 1 per second, watermark lag at most 2 s).
#   bench/overlap_matrix.sh [--seconds S] [--configs "WRITERS:TX_MS:MODE:READER:RATE ..."] [--out DIR]
# Default configurations: 8 writers of 100-300 ms, 32 of 300-1000 ms and 64 of 1-3 s, beside
# fast writers at 1,500 events/s, in mark, delete and keep, without a reader; the 64 writers
# of 1-3 s with a REPEATABLE READ reader in each mode; and 16 writers of 300-1000 ms beside
# 3,000 events/s with the reader, in each mode (15 runs, about 2.8 hours).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=600 out="" configs=""
. scripts/common.sh
common_flags "[--seconds S] [--configs \"WRITERS:TX_MS:MODE:READER:RATE ...\"] [--out DIR]" \
    "--seconds=seconds --configs=configs --out=out" "$@"
common_bench_out overlap_matrix
if [ -z "$configs" ]; then
    for m in mark delete keep; do
        configs="$configs 8:100-300:$m:0:1500 32:300-1000:$m:0:1500 64:1000-3000:$m:0:1500 64:1000-3000:$m:1:1500 16:300-1000:$m:1:3000"
    done
fi
printf '| writers | tx ms | mode | reader | events/s | max pending | 2 s of writes | from the bottom per s | max W lag s | max held s | final pending |\n' >"$out/table.md"
printf '|---|---|---|---|---|---|---|---|---|---|---|\n' >>"$out/table.md"
for c in $configs; do
    IFS=: read -r writers tx mode reader rate <<<"$c"
    say "writers=$writers tx_ms=$tx mode=$mode reader=$reader rate=$rate"
    bash bench/overlap.sh --seconds "$seconds" --writers "$writers" --tx-ms "$tx" --on-sent "$mode" --reader "$reader" \
        --rate "$rate" --out "$out/$writers-$tx-$mode-$reader-$rate" >"$out/$writers-$tx-$mode-$reader-$rate.log" 2>&1 || true
    line=$(grep '^RESULT' "$out/$writers-$tx-$mode-$reader-$rate.log" | tail -1 || true)
    get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $line"; }
    getf() { get "$1" | awk '{ printf "%.2f", $1 }'; }
    if [ -z "$line" ]; then
        printf '| %s | %s | %s | %s | run failed: %s.log | | | | | | |\n' "$writers" "$tx" "$mode" "$reader" "$out/$writers-$tx-$mode-$reader-$rate" >>"$out/table.md"
        continue
    fi
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$writers" "$tx" "$mode" \
        "$([ "$reader" = 1 ] && echo yes || echo no)" "$(get events_per_s)" "$(get overlap_max_pending)" \
        "$(get two_seconds)" "$(get max_bottom_per_s)" "$([ "$mode" = keep ] && getf max_wlag_s || echo -)" \
        "$(getf max_held_s)" "$(get overlap_final_pending)" >>"$out/table.md"
    echo "$line"
done
cat "$out/table.md"
say "runs in $out"
