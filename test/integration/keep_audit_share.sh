#!/usr/bin/env bash
# OUTBOX_ON_SENT=keep: the watermark audit shares the worker session; it never starves the
# claims or the floors' probe. The audit of one partition is due every
# OUTBOX_WATERMARK_AUDIT_MS / 256; at the lowest setting (100 ms) that is 0 ms, and a turn
# that outlasts its interval (a busy server) is due again the moment it ends. Before, the
# audit ranked above the probe and the claim and was sent whenever due: at 640 ms it took
# the session whenever turns slowed past 2.5 ms (keep tests failed beside heavy ones in CI:
# "W past the rolled-back id" and "row 13 published" timed out, the relay's session busy),
# and at 100 ms no claim was ever sent. Here, at 100 ms:
#  - rows written by 4 writers are all published, in key order;
#  - W moves past a rolled-back id (the probe runs), and a row planted below W is found
#    by the audit and published (the claim runs after an audit's find);
#  - the audit itself goes on meanwhile: a whole round of every partition at least.
. "$(dirname "$0")/lib.sh"
[ "$ON_SENT" = keep ] || fail "run with RELAYTEST_ON_SENT=keep"
setup_db
track_inserts
RELAY_ENV=(OUTBOX_WATERMARK_AUDIT_MS=100)
start_relay main >/dev/null
for k in $(keys_in 0 20); do ins_key "$k" >/dev/null; done
wait_until 30 "the first rows SENT" all_sent
writers 4 500 200
wait_until 30 "the writers' rows SENT" all_sent

plant_below_w planted
log "row $hole planted below W of lease partition $r"
wait_until 30 "the audit publishing row $hole" metric_at_least main outbox_watermark_gaps_total 1
wait_until 30 "row $hole published" eval '[ "$(psqlc "SELECT count(*) FROM outbox_parked WHERE id = '"$hole"'")" = 0 ]'
audits=$(metric main outbox_watermark_audits_total) || fail "scraping the audit count failed"
[ "$audits" -ge 256 ] || fail "only $audits audit turns: the claims starved the audit"
stop_relay main || fail "relay exited with $? on SIGTERM"
check_inserted "$TOPIC_PREFIX.order" || fail "rows lost, repeated or out of key order"
log "ok: $audits audit turns; $(cat "$WORK/check.out")"
