# Sourced by scripts/test_docker.sh and scripts/test_kathara.sh, which set
# LOGDIR and REPO and define fail().
# logged NAME CMD...: run CMD with its output in $LOGDIR/NAME.log; on failure
# show the log's tail and fail naming it.
logged() {
    local log=$LOGDIR/$1.log
    shift
    if ! "$@" >"$log" 2>&1; then
        tail -n 40 "$log" | sed 's/^/    | /'
        fail "'$*' failed (${log#"$REPO"/})"
    fi
}
