#!/usr/bin/env bash
# The short chaos run in CI: 20,000 events, 6 SIGKILLs, Kafka restarted twice, PostgreSQL once.
. "$(dirname "$0")/lib.sh"
bash "$RELAYTEST_SRC/test/chaos/chaos.sh" --events 20000 --kills 6 --keys 300 --clients 6 | tee "$WORK/chaos.out"
grep -q "^CHAOS .* lost=0 .* order_violations=0 kills=6$" "$WORK/chaos.out" || fail "chaos run failed"
log "ok"
