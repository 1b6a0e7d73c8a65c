#!/usr/bin/env bash
# wq.on_shutdown (SPEC 7.1): SIGTERM begins a graceful stop, the hooks run
# while running handlers drain, and the process exits 0 once they are done;
# a hook that raises makes the exit status 1 (the other hooks still run).
. "$(dirname "$0")/lib.sh"

for mode in ok fail; do
    "$WQRUN" --quiet "$E2E_DIR/lua/shutdown_hooks.lua" "$mode" >"$TMP/$mode.out" 2>"$TMP/$mode.err" &
    pid=$!
    for i in $(seq 100); do grep -q started "$TMP/$mode.out" && break; sleep 0.02; done
    sleep 0.1
    kill -TERM "$pid"
    wait_exit "$pid" 10
    out=$(cat "$TMP/$mode.out")
    case $out in
    *"summary: 2 done, 98 left"*) pass ;;
    *) fail "$mode: the hook's summary counts the two drained handlers: $out" ;;
    esac
    if [ "$mode" = ok ]; then
        check "exit 0 after the hooks (got $RC)" test "$RC" = 0
    else
        check "a failed hook makes the exit status 1 (got $RC)" test "$RC" = 1
        expect_in "$(cat "$TMP/$mode.err")" "the summary could not be written" "the hook's error is reported"
    fi
done

finish
