#!/bin/sh
# gcptui's job supervisor: plain POSIX sh, runs on the VM. gcptui installs it under ~/.gcptui/bin/
# (the file name carries a hash of this content, so a new version installs beside the old one).
#
#   gcptui-job.sh status
#   gcptui-job.sh start   DIR COMMAND SETUP [NAME=VALUE...]    refuses (exit 3) while a job runs
#   gcptui-job.sh kill    GRACE_TENTHS                         SIGTERM the group, SIGKILL after the grace
#   gcptui-job.sh restart GRACE_TENTHS DIR COMMAND SETUP [NAME=VALUE...]
#   gcptui-job.sh run     DIR COMMAND SETUP [NAME=VALUE...]    internal: the supervisor itself
#
# start/kill/restart/status print the job's state as key=value lines, then "command:" and the raw
# command to the end. Exit codes: 0 done, 3 already running, 4 usage, 5 no project directory,
# 6 cannot detach (no setsid/python3/perl), 7 another gcptui operation holds the lock.
#
# State lives in ~/.gcptui/job/ so every client sees the same truth:
#   pgid pid command started_at ended_at exit_code state(running|exited|killed) phase(setup|command)
#   output.log (appended across starts)  metrics.jsonl (GCPTUI_METRICS)  preempted (reserved)
# and ~/.gcptui/setup.done once the setup command succeeded.

set -u
ROOT="$HOME/.gcptui"
JOB="$ROOT/job"
LOG="$JOB/output.log"
SETUP_DONE="$ROOT/setup.done"
SELF="$0"

now() { date -u +%Y-%m-%dT%H:%M:%SZ; }

# Atomic write: a reader on another connection never sees half a file.
put() { printf '%s\n' "$2" > "$JOB/.$1.$$" && mv -f "$JOB/.$1.$$" "$JOB/$1"; }
# Reads use builtins only: status is polled often, on many hosts at once, and a fork costs.
get() {
	[ -f "$JOB/$1" ] || return 0
	while IFS= read -r line || [ -n "$line" ]; do printf '%s\n' "$line"; done < "$JOB/$1"
}
load() { eval "$1="; [ -f "$JOB/$2" ] && IFS= read -r "$1" < "$JOB/$2"; return 0; } # VAR FILE
get1() { load v "$1"; printf '%s' "$v"; }

# A process is alive when it exists and is not a zombie (an init that never reaps leaves zombies).
alive() {
	[ -n "$1" ] || return 1
	if [ -d /proc/self ]; then
		st=
		read -r st 2>/dev/null < "/proc/$1/stat" || return 1
		st=${st##*") "}
		[ "${st%% *}" != Z ]
	else
		st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
		case $st in Z* | "") return 1 ;; *) return 0 ;; esac
	fi
}

# Some live process is in process group $1.
group_alive() {
	[ -n "$1" ] || return 1
	if [ -d /proc/self ]; then
		# Fast path: the leader (the supervisor) itself is alive and still leads the group.
		st=
		if read -r st 2>/dev/null < "/proc/$1/stat"; then
			# shellcheck disable=SC2086
			set -- "$1" ${st##*") "}
			[ "$4" = "$1" ] && [ "$2" != Z ] && return 0
		fi
		for f in /proc/[0-9]*/stat; do
			st=
			read -r st 2>/dev/null < "$f" || continue
			# shellcheck disable=SC2086 # fields after the command name: state ppid pgrp ...
			set -- "$1" ${st##*") "}
			[ "$4" = "$1" ] && [ "$2" != Z ] && return 0
		done
		return 1
	fi
	ps -A -o pgid= -o stat= 2>/dev/null | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { found = 1 } END { exit !found }'
}

running() { [ -f "$JOB/pgid" ] && [ ! -f "$JOB/exit_code" ] && group_alive "$(get1 pgid)"; }

# mkdir is atomic: one start/kill/restart at a time per VM, whichever laptop sends it.
lock() {
	mkdir -p "$JOB" || exit 4
	tries=0
	until mkdir "$JOB/.lock" 2>/dev/null; do
		holder=
		read -r holder 2>/dev/null < "$JOB/.lock/pid"
		if [ -n "$holder" ] && ! alive "$holder"; then
			rm -rf "$JOB/.lock"
			continue
		fi
		tries=$((tries + 1))
		if [ "$tries" -gt 1200 ]; then
			echo "error=another gcptui operation on this VM holds $JOB/.lock (pid ${holder:-?}): try again"
			exit 7
		fi
		sleep 0.1
	done
	echo $$ > "$JOB/.lock/pid"
	trap 'rm -rf "$JOB/.lock"' EXIT
}

print_status() {
	if [ ! -f "$JOB/pgid" ] && [ ! -f "$JOB/state" ]; then
		echo "state=none"
		return
	fi
	load state state
	load pgid pgid
	detail=
	if [ -f "$JOB/exit_code" ]; then
		[ "$state" = killed ] || state=exited
	elif group_alive "$pgid"; then
		state=running
	elif [ -n "$pgid" ]; then
		# Gone without a word from its supervisor: the VM rebooted or someone killed it from outside.
		state=killed
		detail=vanished
	fi
	[ -f "$JOB/preempted" ] && detail=preempted
	for field in pid exit_code started_at ended_at phase; do
		load value "$field"
		eval "$field=\$value"
	done
	printf '%s\n' "state=$state" "detail=$detail" "pid=$pid" "pgid=$pgid" "exit_code=$exit_code" \
		"started_at=$started_at" "ended_at=$ended_at" "phase=$phase" "command:"
	get command
}

# Start the supervisor in a new session: it leads the job's process group, detached from SSH.
detach() {
	if command -v setsid > /dev/null 2>&1; then
		setsid "$@" < /dev/null >> "$LOG" 2>&1 &
	elif command -v python3 > /dev/null 2>&1 || command -v python > /dev/null 2>&1; then
		# macOS (the emulator on a laptop) has no setsid(1); any Python does it in place.
		py=$(command -v python3 || command -v python)
		"$py" -c 'import os, sys; os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])' "$@" < /dev/null >> "$LOG" 2>&1 &
	elif command -v perl > /dev/null 2>&1; then
		perl -MPOSIX -e 'POSIX::setsid(); exec @ARGV or die' "$@" < /dev/null >> "$LOG" 2>&1 &
	else
		echo "error=this VM has neither setsid nor python3 nor perl to detach the job: install util-linux"
		exit 6
	fi
}

launch() { # DIR COMMAND SETUP [NAME=VALUE...]
	case $1 in
	"~") dir=$HOME ;;
	"~/"*) dir=$HOME/${1#"~/"} ;;
	/*) dir=$1 ;;
	*) dir=$HOME/$1 ;;
	esac
	if [ ! -d "$dir" ]; then
		echo "error=the project directory $1 does not exist on this VM: sync the project first"
		exit 5
	fi
	rm -f "$JOB/exit_code" "$JOB/ended_at" "$JOB/pid" "$JOB/pgid" "$JOB/preempted"
	put command "$2"
	put started_at "$(now)"
	put state running
	put phase starting
	shift
	detach sh "$SELF" run "$dir" "$@"
	# Wait (briefly) until the supervisor recorded itself, so the caller gets a pid back.
	tries=0
	while { [ ! -f "$JOB/pid" ] || [ ! -f "$JOB/pgid" ]; } && [ "$tries" -lt 100 ]; do
		tries=$((tries + 1))
		sleep 0.05
	done
}

# Wait up to $2 tenths of a second for group $1 to be gone.
wait_gone() {
	n=$2
	while group_alive "$1"; do
		[ "$n" -le 0 ] && return 1
		n=$((n - 1))
		sleep 0.1
	done
	return 0
}

kill_job() { # GRACE_TENTHS; the lock is held
	pgid=$(get1 pgid)
	group_alive "$pgid" || return 0
	[ -f "$JOB/exit_code" ] || put state killed
	echo "==== gcptui: $(now) kill: SIGTERM to process group $pgid, SIGKILL after $(($1 / 10)).$(($1 % 10))s ====" >> "$LOG"
	kill -s TERM -- "-$pgid" 2> /dev/null
	if ! wait_gone "$pgid" "$1"; then
		echo "==== gcptui: $(now) kill: still running after the grace period: SIGKILL ====" >> "$LOG"
		kill -s KILL -- "-$pgid" 2> /dev/null
		wait_gone "$pgid" 100
	fi
	# SIGKILL also ended the supervisor before it could write the exit code: record it ourselves.
	if [ ! -f "$JOB/exit_code" ]; then
		put ended_at "$(now)"
		put exit_code 137
		echo "==== gcptui: $(now) job killed (exit code 137) ====" >> "$LOG"
	fi
}

# The supervisor: leader of the job's process group, waits for setup and command, records the end.
run_job() { # DIR COMMAND SETUP [NAME=VALUE...]
	dir=$1 cmd=$2 setup=$3
	shift 3
	put pgid $$
	# Like nohup; and TERM/INT only mark us, so we outlive the command and record its exit code.
	# (A trap with a handler is reset to the default in the commands we start; '' would be inherited.)
	trap '' HUP
	trap 'terminated=1' TERM INT
	terminated=0
	GCPTUI_METRICS="$JOB/metrics.jsonl"
	GCPTUI_JOB_DIR="$JOB"
	export GCPTUI_METRICS GCPTUI_JOB_DIR
	for pair in "$@"; do export "$pair"; done
	echo "==== gcptui: $(now) job started in $dir ===="
	rc=0
	cd "$dir" || { rc=1; echo "==== gcptui: cannot enter $dir ===="; }
	if [ "$rc" -eq 0 ] && [ -n "$setup" ] && [ ! -f "$SETUP_DONE" ]; then
		put phase setup
		echo "==== gcptui: setup: $setup"
		child "$setup"
		rc=$?
		if [ "$rc" -eq 0 ]; then
			printf '%s\n' "$setup" > "$SETUP_DONE"
		else
			echo "==== gcptui: setup failed with exit code $rc: the command is not started ===="
		fi
	fi
	if [ "$rc" -eq 0 ] && [ "$terminated" -eq 0 ]; then
		put phase command
		echo "==== gcptui: command: $cmd"
		child "$cmd"
		rc=$?
	fi
	[ "$(get1 state)" = killed ] || put state exited
	put ended_at "$(now)"
	put exit_code "$rc"
	echo "==== gcptui: $(now) job ended with exit code $rc ===="
	# Future: a preemption watcher (metadata server, instance/preempted) starts here in the
	# background, touches $JOB/preempted and forwards SIGTERM to the group.
	exit "$rc"
}

# Run $1 with sh -c in the foreground; the process records its own pid first, then becomes the command.
child() {
	# shellcheck disable=SC2016 # expanded by the inner sh
	sh -c 'echo $$ > "$0.tmp" && mv -f "$0.tmp" "$0" && exec sh -c "$1"' "$JOB/pid" "$1"
}

op=${1:-}
[ $# -gt 0 ] && shift
case $op in
status)
	print_status
	;;
start)
	[ $# -ge 3 ] || exit 4
	lock
	if running; then
		print_status
		exit 3
	fi
	launch "$@"
	print_status
	;;
kill)
	[ $# -eq 1 ] || exit 4
	lock
	kill_job "$1"
	print_status
	;;
restart)
	[ $# -ge 4 ] || exit 4
	lock
	kill_job "$1"
	shift
	launch "$@"
	print_status
	;;
run)
	[ $# -ge 3 ] || exit 4
	run_job "$@"
	;;
*)
	echo "error=usage: gcptui-job.sh status|start|kill|restart|run ..."
	exit 4
	;;
esac
