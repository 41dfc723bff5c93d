#!/usr/bin/env bash
# The Quick start's demo stops cleanly, both ways a user stops it: Ctrl-C (a SIGINT to the
# whole process group, as a terminal sends it) and DEMO_SECONDS. Each run must exit 0, let
# the relay finish its own shutdown (exit 0, not the "second signal" exit) and leave no
# process and no folder behind; outbox-inbox, which books the demo's orders in a billing
# database, stops cleanly too, having applied some. A relay that dies at start stops the
# demo with a non-zero status and its last lines.
. "$(dirname "$0")/lib.sh"

group_gone() { ! pgrep -g "$1" >/dev/null; }

# run_demo HOW: runs scripts/demo.sh in its own process group; HOW is ctrl-c, seconds, or
# rabbitmq (seconds, with --broker rabbitmq).
run_demo() {
    local how=$1 out=$WORK/demo-$1.out pgid rc=0
    local seconds= args=()
    [ "$how" != ctrl-c ] && seconds=16
    [ "$how" = rabbitmq ] && args=(--broker rabbitmq)
    # A terminal's foreground job has SIGINT at its default; a background job of this script
    # would start with it ignored (and bash cannot trap a signal ignored at entry).
    DEMO_SECONDS=$seconds setsid env --default-signal=INT bash "$RELAYTEST_SRC/scripts/demo.sh" "${args[@]}" >"$out" 2>&1 &
    pgid=$!
    DEMO_PIDS+=("$pgid")
    if [ "$how" = ctrl-c ]; then
        wait_until 300 "events shown by the demo" grep -q '"order_id"' "$out"
        # and booked by its outbox-inbox (its consumer group forms a few seconds later)
        local port
        port=$(sed -n 's/^servers: PostgreSQL on 127.0.0.1:\([0-9]*\),.*/\1/p' "$out")
        wait_until 60 "an order booked by the demo's outbox-inbox" eval \
            '[ "$("$PG_BIN/psql" -X -At "host=127.0.0.1 port=$port user=postgres dbname=billing" -c "SELECT count(*) FROM revenue" 2>/dev/null || echo 0)" -ge 1 ]'
        log "Ctrl-C: SIGINT to process group $pgid"
        kill -INT -- "-$pgid"
    fi
    wait "$pgid" || rc=$?
    sed 's/^/#   /' "$out" | tail -n 40
    [ "$rc" = 0 ] || fail "demo ($how) exited with status $rc"
    grep -q '"order_id"' "$out" || fail "demo ($how) showed no event"
    grep -q "^== stopping ($([ "$how" != ctrl-c ] && echo finished || echo interrupted))" "$out" ||
        fail "demo ($how) did not stop the way it was asked to"
    grep -q '^relay exited with status 0' "$out" || fail "demo ($how): the relay did not shut down cleanly"
    grep -q 'relay stopped: ' "$out" || fail "demo ($how): the relay's last lines are missing"
    grep -q '^outbox-inbox exited with status 0' "$out" && grep -q 'inbox stopped: [1-9][0-9]* applied' "$out" ||
        fail "demo ($how): outbox-inbox did not apply events and stop cleanly"
    grep -q '^billing database: [1-9][0-9]* orders applied once each, revenue [0-9.]*$' "$out" ||
        fail "demo ($how): the billing database shows no order"
    left_nothing "$how" "$out" "$pgid"
    log "demo ($how): exit 0, relay stopped cleanly, nothing left behind"
}
# left_nothing HOW OUT PGID: the demo's process group, servers and folders are gone.
left_nothing() {
    local how=$1 out=$2 pgid=$3 servers workdir d
    servers=$(sed -n 's/^servers: .*(\(\/tmp\/outbox-servers\.[^)]*\))$/\1/p' "$out")
    workdir=$(sed -n 's/^== starting the relay (log: \(.*\)\/relay\.log;.*$/\1/p' "$out")
    [ -n "$servers" ] && [ -n "$workdir" ] || fail "demo ($how) did not name its folders"
    # An orphaned `sleep` of the writer loop may take half a second to go.
    wait_until 10 "demo ($how) process group gone" group_gone "$pgid"
    for d in "$servers" "$workdir"; do
        [ ! -e "$d" ] || fail "demo ($how) left $d behind"
        if pgrep -f "$d" >/dev/null; then
            pgrep -af "$d" | sed 's/^/#   /'
            fail "demo ($how) left processes running in $d"
        fi
    done
}

# A relay that dies at start (here: the HTTP port it is told to use is taken, as the defaults
# were on a machine where the first demo failed silently): the demo says which program exited,
# with its last lines naming the cause, within seconds, and exits non-zero, leaving nothing
# behind. (Unless told, the demo picks free ports itself: the runs above.)
run_demo_dies() {
    local out=$WORK/demo-dies.out port pgid rc=0 holder
    port=$(free_port)
    python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); time.sleep(600)' "$port" &
    holder=$!
    DEMO_HOLDER=$holder
    wait_until 10 "port $port taken" port_open "$port"
    DEMO_SECONDS=300 OUTBOX_HTTP_ADDR=127.0.0.1:$port setsid env --default-signal=INT \
        bash "$RELAYTEST_SRC/scripts/demo.sh" >"$out" 2>&1 &
    pgid=$!
    DEMO_PIDS+=("$pgid")
    wait_until 300 "the demo starting its relay" grep -q '^== starting the relay' "$out"
    wait_until 10 "the demo naming the relay's exit" grep -q '^== demo: outbox-relay exited (status [1-9][0-9]*)' "$out"
    wait "$pgid" || rc=$?
    kill "$holder" 2>/dev/null || true
    sed 's/^/#   /' "$out" | tail -n 25
    [ "$rc" != 0 ] || fail "the demo exited 0 although its relay died"
    grep -q "OUTBOX_HTTP_ADDR: cannot listen on 127.0.0.1:$port (port in use?)" "$out" ||
        fail "the demo did not show the relay's last lines naming the taken port"
    grep -q '^== stopping (failed)' "$out" || fail "the demo did not stop as failed"
    left_nothing dies "$out" "$pgid"
    log "demo with a relay that dies at start: exit $rc, the cause shown, nothing left behind"
}
DEMO_PIDS=()
kill_demos() {
    TEST_RC=${TEST_RC:-$?}
    local p
    # a demo still running (the test failed): SIGTERM first, so that it stops the servers it
    # started (SIGKILL alone left them running), then SIGKILL whatever is left after 20 s
    for p in "${DEMO_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${DEMO_PIDS[@]}"; do
        for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
        kill -KILL -- "-$p" 2>/dev/null || true
    done
    [ -z "${DEMO_HOLDER:-}" ] || kill "$DEMO_HOLDER" 2>/dev/null || true
    cleanup
}
trap kill_demos EXIT

run_demo ctrl-c
run_demo seconds
run_demo rabbitmq
run_demo_dies
grep -q "RabbitMQ on 127.0.0.1" "$WORK/demo-rabbitmq.out" && grep -q "outbox-tail: reading exchange outbox" "$WORK/demo-rabbitmq.out" ||
    fail "the demo with --broker rabbitmq did not run a RabbitMQ node and read its exchange"
log "ok"
