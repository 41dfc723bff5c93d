#!/usr/bin/env bash
# Quantiles of outbox_event_latency_seconds between two /metrics scrapes (the relay's own
# commit -> Kafka acknowledgement histogram), by linear interpolation inside buckets.
#   bench/hist_quantiles.sh BEFORE.txt AFTER.txt   ->  "count=.. p50_ms=.. p99_ms=.. p999_ms=.."
set -euo pipefail
awk '
    FNR == NR && /^outbox_event_latency_seconds_bucket/ { match($0, /le="[^"]*"/); b[substr($0, RSTART + 4, RLENGTH - 5)] = $2; next }
    /^outbox_event_latency_seconds_bucket/ {
        match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5)
        n++; bound[n] = (le == "+Inf") ? 1e9 : le + 0; cum[n] = $2 - b[le]
    }
    function q(p,   i, lo, prev, rank) {
        rank = p * cum[n]; prev = 0; lo = 0
        for (i = 1; i <= n; i++) {
            if (cum[i] >= rank && cum[i] > prev)
                return (lo + (bound[i] - lo) * (rank - prev) / (cum[i] - prev)) * 1000
            prev = cum[i]; lo = bound[i]
        }
        return lo * 1000
    }
    END { printf "count=%d p50_ms=%.1f p99_ms=%.1f p999_ms=%.1f\n", cum[n], q(0.5), q(0.99), q(0.999) }
' "$1" "$2"
