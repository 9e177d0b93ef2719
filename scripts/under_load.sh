#!/bin/sh
# The test suite twice in a row under load, as the project checks that its tests hold on a busy
# 2-core machine: BUSY busy loops (default 2) run beside it and the load average is logged every 30 s.
# With --stale-job, a stale job state (state=running, a dead pid) is put in the real ~/.gcptui/job
# for the runs and taken away afterwards (only when there was none): the tests must not see it.
#
#   sh scripts/under_load.sh [--stale-job] [BUSY]
set -u
stale=0
if [ "${1:-}" = "--stale-job" ]; then stale=1; shift; fi
busy=${1:-2}
log=${TMPDIR:-/tmp}/under-load.$$
mkdir -p "$log"
pids=""
i=0
while [ "$i" -lt "$busy" ]; do
  python3 -c 'while 1: pass' & pids="$pids $!"
  i=$((i + 1))
done
(while :; do echo "$(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 30; done) > "$log/load" & pids="$pids $!"
made=0
if [ "$stale" = 1 ] && [ ! -e "$HOME/.gcptui/job" ]; then
  mkdir -p "$HOME/.gcptui/job" && echo running > "$HOME/.gcptui/job/state" && echo 99999 > "$HOME/.gcptui/job/pid"
  echo 99999 > "$HOME/.gcptui/job/pgid"
  made=1
fi
trap 'kill $pids 2>/dev/null; [ "$made" = 1 ] && rm -rf "$HOME/.gcptui/job"' EXIT INT TERM
status=0
for run in 1 2; do
  python -m pytest -p no:cacheprovider > "$log/run-$run" 2>&1
  code=$?
  echo "run $run: exit $code, $(tail -n 1 "$log/run-$run")"
  [ "$code" = 0 ] || status=1
done
echo "load averages (1, 5, 15 min), every 30 s:"
cat "$log/load"
echo "full output: $log/run-1, $log/run-2"
exit "$status"
