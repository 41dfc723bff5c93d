#!/usr/bin/env bash
# Garbage, slow and oversized HTTP requests while events flow: no crash, no stall, and
# /metrics keeps answering.
. "$(dirname "$0")/lib.sh"
setup_db
start_relay main >/dev/null
port=$(http_port main)
wait_until 20 "/healthz answering" curl -sf "http://127.0.0.1:$port/healthz" -o /dev/null
writers 4 1500 100 &
writer_pid=$!
slow() { # a client that sends half a request and then waits
    exec 3<>"/dev/tcp/127.0.0.1/$port" || return 0
    printf 'GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ' >&3
    sleep 20
    exec 3>&-
}
for _ in $(seq 1 30); do slow & done
for i in $(seq 1 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port" && head -c $((i * 37 % 4000 + 1)) /dev/urandom >&3 && exec 3>&-) 2>/dev/null || true
done
(exec 3<>"/dev/tcp/127.0.0.1/$port" && { printf 'GET /metrics HTTP/1.1\r\nX-Big: '; head -c 2000000 /dev/zero | tr '\0' a; printf '\r\n\r\n'; } >&3 2>/dev/null; exec 3>&-) 2>/dev/null || true
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST --data-binary @/dev/null "http://127.0.0.1:$port/metrics")
[ "$code" = 405 ] || fail "POST /metrics answered $code, want 405"
code=$(curl -s --path-as-is -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/../../etc/passwd")
[ "$code" = 404 ] || [ "$code" = 400 ] || fail "path traversal answered $code"
answered=0
for _ in $(seq 1 10); do
    curl -sf -m 5 "http://127.0.0.1:$port/metrics" | grep '^outbox_published_total ' >/dev/null && answered=$((answered + 1))
    sleep 0.2
done
log "/metrics answered $answered of 10 scrapes while 30 slow clients held connections"
[ "$answered" = 10 ] || fail "/metrics did not answer every scrape under abuse"
wait "$writer_pid" || fail "writers failed"
wait_until 60 "all rows SENT under HTTP abuse" all_sent
kill -0 "$(relay_pid main)" || fail "relay died"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz")" = 200 ] || fail "/healthz not 200"
stop_relay main || fail "relay exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" --exact || fail "loss or disorder under HTTP abuse"
log "ok"
