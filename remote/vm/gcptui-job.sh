#!/bin/sh
# gcptui's job supervisor: plain POSIX sh, runs on the VM. gcptui installs it under ~/.gcptui/bin/
# (the file name carries a hash of this content, so a new version installs beside the old one).
#
#   gcptui-job.sh status
#   gcptui-job.sh start   DIR COMMAND SETUP                    refuses (exit 3) while a job runs
#   gcptui-job.sh kill    GRACE_TENTHS [BY]                    SIGTERM the group, SIGKILL after the grace;
#                                                              BY=group-stop: keep-alive's, for a lost node
#   gcptui-job.sh restart GRACE_TENTHS DIR COMMAND SETUP
#   gcptui-job.sh watch   [INTERVAL [HEARTBEAT_POLLS]]         print the state at every change, until hung up
#   gcptui-job.sh busy                                         running=N: job slots with a job running
#   gcptui-job.sh run     DIR COMMAND SETUP                    internal: the supervisor itself
#
# The job's environment ([job].env: API tokens) never travels in argv, where `ps` shows it to every
# user of the VM: the caller writes it (a file of quoted `export` lines, read from the SSH channel's
# stdin) to a private file and names it in $GCPTUI_ENV_IN; start/restart move it to $JOB/env (0600),
# which the supervisor sources. Everything under ~/.gcptui is private: umask 077, files 0600.
#
# start/kill/restart/status print the job's state as key=value lines, then "command:" and the raw
# command to the end. Exit codes: 0 done, 3 already running, 4 usage, 5 no project directory,
# 6 cannot detach (no setsid/python3/perl), 7 another gcptui operation holds the lock.
#
# State lives in ~/.gcptui/job/ so every client sees the same truth:
#   pgid pid command started_at ended_at exit_code state(running|exited|killed) phase(setup|command)
#   boot_id (the kernel's, at start: pids of an earlier boot mean nothing)
#   output.log (appended across starts)  metrics.jsonl (GCPTUI_METRICS)
#   preempted (UTC time of the metadata server's preemption or host-maintenance notice)
#   terminated (UTC time: the supervisor itself got SIGTERM or SIGINT, and not from `kill`: the VM
#   shutting down, most often, before a preemption notice was recorded; status says detail=terminated)
#   killed_by (group-stop: keep-alive stopped it because another node of its group was lost;
#   status says so in detail, and a preemption resumes it, unlike a user's kill; a user's kill
#   removes it). Both markers have a second line, "STARTED_AT PGID" of the job they are about.
#   .lock/ (pid: the holder's pid alone, boot: its boot id), held by one start/kill/restart
# and ~/.gcptui/setup.done once the setup command succeeded.
#
# While a job runs, two notice watchers beside it long-poll the GCE metadata server's
# instance/preempted and instance/maintenance-event (GCE_METADATA_HOST, else
# metadata.google.internal; curl, else wget, else python3: GCPTUI_METADATA_FETCHER overrides the
# choice). When preempted turns TRUE, or maintenance-event announces TERMINATE_ON_HOST_MAINTENANCE
# (a GPU VM cannot live-migrate), the watcher records `preempted`, appends a banner to output.log and
# sends SIGTERM to the job's process group at once, so the trainer checkpoints before the VM goes
# down. Off GCE they give up after a few failed tries.

set -u
umask 077
ROOT="$HOME/.gcptui"
# GCPTUI_JOB_SLOT=N (N >= 1) keeps a second, third, ... job beside the first on the same VM, each
# with its own state directory ~/.gcptui/job-N (a sweep's trials per VM); unset: ~/.gcptui/job.
case ${GCPTUI_JOB_SLOT:-} in
*[!0-9]*)
	echo "error=GCPTUI_JOB_SLOT must be a number, not ${GCPTUI_JOB_SLOT}"
	exit 4
	;;
esac
JOB="$ROOT/job${GCPTUI_JOB_SLOT:+-$GCPTUI_JOB_SLOT}"
LOG="$JOB/output.log"
SETUP_DONE="$ROOT/setup.done"
SELF="$0"

now() { date -u +%Y-%m-%dT%H:%M:%SZ; }

# The kernel's boot id, in $b ("" where there is none, e.g. macOS).
boot_id() {
	b=
	[ -r /proc/sys/kernel/random/boot_id ] && read -r b < /proc/sys/kernel/random/boot_id
	return 0
}

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

# The recorded job still runs. An ended job's pgid (exit_code written), or one of an earlier boot,
# may name someone else's process group by now: neither counts, and neither may be signalled.
running() { [ -f "$JOB/pgid" ] && [ ! -f "$JOB/exit_code" ] && same_boot && group_alive "$(get1 pgid)"; }

# The lock, ~/.gcptui/job/.lock/: `pid` holds the holder's pid alone (the format every version reads:
# an older one reads the whole line as a pid) and `boot` its boot id, written before `pid`. The
# version before this one wrote "PID BOOT_ID" into `pid`; the oldest wrote no `boot`.
read_lock() { # sets $seen_pid $seen_boot ("" where absent)
	seen_pid= seen_boot=
	read -r seen_pid 2>/dev/null < "$JOB/.lock/pid"
	read -r seen_boot 2>/dev/null < "$JOB/.lock/boot"
	case $seen_pid in *" "*)
		seen_boot=${seen_pid#* }
		seen_pid=${seen_pid%% *}
		;;
	esac
	return 0
}

# Lock directory $1's mtime in $made (seconds since the epoch; "" where date cannot tell), and this
# boot's start in $btime ("" off Linux).
lock_times() { # DIR
	btime=
	while read -r key value; do [ "$key" = btime ] && btime=$value; done 2> /dev/null < /proc/stat
	made=$(date -r "$1" +%s 2>/dev/null) || made=
}

# Lock directory $1, which has no pid, was left so: it predates this boot or is NOPID_SECONDS old.
NOPID_SECONDS=10
abandoned() { # DIR
	lock_times "$1"
	[ -n "$made" ] || return 1
	[ -n "$btime" ] && [ "$made" -lt "$btime" ] && return 0
	[ $(($(date +%s) - made)) -ge "$NOPID_SECONDS" ]
}

# The lock named by PID and BOOT can no longer be held by anyone: its pid is dead, or of an earlier
# boot (where it may name anyone now). A lock with no pid at all is stale once it predates this boot
# or is NOPID_SECONDS old: its holder died between mkdir and writing it (or a takeover did; see lock).
stale_lock() { # PID BOOT; $b is this boot's id
	[ -n "$1" ] || { abandoned "$JOB/.lock"; return; }
	[ -n "$2" ] && [ "$2" != "$b" ] && return 0
	alive "$1" || return 0
	[ -n "$2" ] && return 1
	# The pid alone (the oldest version's lock): stale when the lock is older than this boot.
	lock_times "$JOB/.lock"
	[ -n "$made" ] && [ -n "$btime" ] && [ "$made" -lt "$btime" ]
}

# A start/restart holds the lock right now (its supervisor may not have recorded itself yet).
launching() {
	[ -d "$JOB/.lock" ] || return 1
	read_lock
	boot_id
	! stale_lock "$seen_pid" "$seen_boot"
}

# Take over the stale lock judged from $seen_pid/$seen_boot; 0 when it is gone. Several waiters may
# judge the same lock stale at once, and one of them may already have made its own lock at the same
# path, so the lock is claimed through its pid file, whose rename only one waiter's mv can win; the
# winner checks it took the record it judged (else it took a live holder's: it puts it back), then
# renames the lock aside and removes it. Meanwhile the lock has no pid and a fresh mtime (the rename),
# which no other waiter judges stale for NOPID_SECONDS. A lock with no pid to claim is renamed aside
# and put back unless it is still one left with no pid (rename keeps a directory's mtime): another
# waiter's fresh lock, made meanwhile, goes back at once. Nothing of it outlives a waiter
# killed midway for longer than NOPID_SECONDS: a lock left with no pid is stale after that.
take_over() {
	dead="$JOB/.lock.dead.$$"
	rm -rf "$dead"
	if [ -n "$seen_pid" ]; then
		mv "$JOB/.lock/pid" "$JOB/.lock/pid.taken.$$" 2>/dev/null || return 1
		again=
		read -r again 2>/dev/null < "$JOB/.lock/pid.taken.$$"
		if [ "${again%% *}" != "$seen_pid" ]; then
			mv "$JOB/.lock/pid.taken.$$" "$JOB/.lock/pid" 2>/dev/null
			return 1
		fi
		mv "$JOB/.lock" "$dead" 2>/dev/null || return 1
		# Not the lock we claimed (we were stalled for NOPID_SECONDS and another waiter replaced it):
		# put it back, unless yet another lock took its place (then its holder has lost it, as the
		# waiter that replaced ours would have taken it anyway).
		if [ ! -f "$dead/pid.taken.$$" ]; then
			[ -e "$JOB/.lock" ] || mv "$dead" "$JOB/.lock" 2>/dev/null
			rm -rf "$dead"
			return 1
		fi
	else
		mv "$JOB/.lock" "$dead" 2>/dev/null || return 1
		if [ -f "$dead/pid" ] || ! abandoned "$dead"; then
			[ -e "$JOB/.lock" ] || mv "$dead" "$JOB/.lock" 2>/dev/null
			rm -rf "$dead"
			return 1
		fi
	fi
	rm -rf "$dead"
}

# mkdir is atomic: one start/kill/restart at a time per VM, whichever laptop sends it.
lock() {
	mkdir -p "$JOB" || exit 4
	chmod 700 "$ROOT" "$JOB" 2>/dev/null # made 0755 by an older version: private now
	boot_id
	tries=0
	until mkdir "$JOB/.lock" 2>/dev/null && owned; do
		read_lock
		stale_lock "$seen_pid" "$seen_boot" && take_over && continue
		tries=$((tries + 1))
		if [ "$tries" -gt 1200 ]; then
			echo "error=another gcptui operation on this VM holds $JOB/.lock (pid ${seen_pid:-?}): try again"
			exit 7
		fi
		sleep 0.1
	done
	trap 'rm -rf "$JOB/.lock"' EXIT
}

# Record ourselves in the lock we just made; false when a takeover renamed it aside first (it then
# goes back, with no pid, and is stale after NOPID_SECONDS): we do not hold it.
owned() {
	printf '%s\n' "$b" 2>/dev/null > "$JOB/.lock/boot" || return 1
	printf '%s\n' "$$" 2>/dev/null > "$JOB/.lock/.pid.$$" && mv -f "$JOB/.lock/.pid.$$" "$JOB/.lock/pid" 2>/dev/null || return 1
	mine=
	read -r mine 2>/dev/null < "$JOB/.lock/pid"
	[ "$mine" = "$$" ]
}

# The job's state in variables, builtins only (status and watch poll it):
#   state detail pid pgid exit_code started_at ended_at phase preempted_at
# Returns 1 when no job ever ran here.
read_status() {
	state= detail= pid= pgid= exit_code= started_at= ended_at= phase= preempted_at=
	[ -f "$JOB/pgid" ] || [ -f "$JOB/state" ] || return 1
	load state state
	load pgid pgid
	if [ -f "$JOB/exit_code" ]; then
		[ "$state" = killed ] || state=exited
	elif [ -n "$pgid" ] && ! same_boot; then
		# The VM rebooted (stopped and started, preempted): its pids are someone else's now.
		state=killed
		detail=vanished
	elif group_alive "$pgid"; then
		state=running
	elif [ -z "$pgid" ] && [ "$state" = running ] && ! launching; then
		# Its start was cut short before the supervisor recorded itself (the launching connection was
		# killed), and no start is under way: it never ran, or runs no longer.
		state=killed
		detail=vanished
	elif [ "$state" = killed ]; then
		# `kill` ended it and writes the exit code next (its SIGKILL took the supervisor too): the
		# user's kill, not a job gone without a word.
		:
	elif [ -n "$pgid" ]; then
		# Gone without a word from its supervisor: the VM rebooted or someone killed it from outside.
		state=killed
		detail=vanished
	fi
	for field in pid exit_code started_at ended_at phase; do
		load value "$field"
		eval "$field=\$value"
	done
	if [ -f "$JOB/preempted" ]; then
		detail=preempted
		load preempted_at preempted
	elif [ "$state" = killed ] && marker killed_by; then
		detail=$mark
	elif [ "$state" = exited ] && marker terminated; then
		detail=terminated
	fi
	return 0
}

# The job a marker (terminated, killed_by) belongs to: an older version's start leaves them in place,
# so each names its job, and one of an earlier job says nothing about this one.
job_stamp() { printf '%s %s' "$(get1 started_at)" "$(get1 pgid)"; }
put_marker() { put "$1" "$2
$(job_stamp)"; } # NAME VALUE
marker() { # NAME; its value in $mark, false when absent or another job's
	mark= of=
	[ -f "$JOB/$1" ] && { IFS= read -r mark && IFS= read -r of; } < "$JOB/$1"
	[ -n "$of" ] && [ "$of" = "$started_at $pgid" ]
}

same_boot() {
	[ -f "$JOB/boot_id" ] || return 0
	boot_id
	load started_boot boot_id
	[ "$started_boot" = "$b" ]
}

print_status() {
	if ! read_status; then
		echo "state=none"
		return
	fi
	printf '%s\n' "state=$state" "detail=$detail" "pid=$pid" "pgid=$pgid" "exit_code=$exit_code" \
		"started_at=$started_at" "ended_at=$ended_at" "phase=$phase" "preempted_at=$preempted_at" "command:"
	get command
}

# Print the state whenever it changes: key=value lines, the command as "|"-prefixed lines, then "--".
# A "." after HEARTBEAT quiet polls lets the client see the link is alive, and makes a watch whose
# reader went away die of SIGPIPE instead of polling forever. Builtins only, but for the sleep.
watch_state() { # INTERVAL HEARTBEAT_POLLS
	# A VM going down SIGTERMs everyone: keep reporting (the preemption notice above all) until the
	# connection goes; SIGHUP (the channel closed) and SIGPIPE still end us.
	trap '' TERM
	last=- quiet=0
	while :; do
		read_status || state=none
		snapshot="$state|$detail|$pid|$pgid|$exit_code|$started_at|$ended_at|$phase|$preempted_at"
		if [ "$snapshot" != "$last" ]; then
			last=$snapshot quiet=0
			printf '%s\n' "state=$state" "detail=$detail" "pid=$pid" "pgid=$pgid" "exit_code=$exit_code" \
				"started_at=$started_at" "ended_at=$ended_at" "phase=$phase" "preempted_at=$preempted_at"
			if [ -f "$JOB/command" ]; then
				while IFS= read -r line || [ -n "$line" ]; do printf '|%s\n' "$line"; done < "$JOB/command"
			fi
			echo --
		else
			quiet=$((quiet + 1))
			if [ "$quiet" -ge "$2" ]; then
				echo .
				quiet=0
			fi
		fi
		sleep "$1"
	done
}

# Start the supervisor in a new session: it leads the job's process group, detached from SSH.
# pick_detacher first, before anything of the job's state changes: without a way to detach, a start
# fails with the state as it was.
pick_detacher() {
	detacher=
	if command -v setsid > /dev/null 2>&1; then
		detacher=setsid
	elif command -v python3 > /dev/null 2>&1 || command -v python > /dev/null 2>&1; then
		# macOS (the emulator on a laptop) has no setsid(1); any Python does it in place.
		detacher=$(command -v python3 || command -v python)
	elif command -v perl > /dev/null 2>&1; then
		detacher=perl
	else
		echo "error=this VM has neither setsid nor python3 nor perl to detach the job: install util-linux"
		exit 6
	fi
}
detach() {
	case $detacher in
	setsid) setsid "$@" < /dev/null >> "$LOG" 2>&1 & ;;
	perl) perl -MPOSIX -e 'POSIX::setsid(); exec @ARGV or die' "$@" < /dev/null >> "$LOG" 2>&1 & ;;
	*) "$detacher" -c 'import os, sys; os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])' "$@" < /dev/null >> "$LOG" 2>&1 & ;;
	esac
}

launch() { # DIR COMMAND SETUP
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
	pick_detacher
	rm -f "$JOB/exit_code" "$JOB/ended_at" "$JOB/pid" "$JOB/pgid" "$JOB/preempted" "$JOB/killed_by" "$JOB/terminated" "$JOB"/.notice*
	if [ -n "${GCPTUI_ENV_IN:-}" ] && [ -f "$GCPTUI_ENV_IN" ]; then
		mv -f "$GCPTUI_ENV_IN" "$JOB/env"
	else
		: > "$JOB/env"
	fi
	chmod 600 "$JOB/env" "$LOG" "$JOB/metrics.jsonl" 2>/dev/null
	put command "$2"
	boot_id
	put boot_id "$b"
	put started_at "$(now)"
	put state running
	put phase starting
	shift
	# The supervisor claims this token (rename is atomic) before it records itself; a launch that gave
	# up waiting claims it instead, so a late supervisor never runs a job the state says failed, and a
	# start never lets go of the lock while a supervisor of its own may still come up.
	GCPTUI_LAUNCH="$JOB/.launch.$$"
	export GCPTUI_LAUNCH
	: > "$GCPTUI_LAUNCH"
	detach sh "$SELF" run "$dir" "$@"
	# Wait until the supervisor recorded itself, so the caller gets a pid back.
	tries=0
	while [ ! -f "$JOB/pid" ] || [ ! -f "$JOB/pgid" ]; do
		tries=$((tries + 1))
		# 15 s: a VM busy loading data can be slow to fork; a start given up on is a failed start.
		if [ "$tries" -eq 300 ] && mv "$GCPTUI_LAUNCH" "$GCPTUI_LAUNCH.abandoned" 2> /dev/null; then
			rm -f "$GCPTUI_LAUNCH.abandoned"
			put ended_at "$(now)"
			put exit_code 127
			put state exited
			echo "==== gcptui: $(now) the supervisor did not start within 15 s: the job is not started ====" >> "$LOG"
			return
		fi
		# Claimed: it records its pgid next, and its pid once setup or the command starts (that may
		# wait for a slow `cd`): the pgid is what keeps a second start out.
		[ "$tries" -ge 100 ] && [ -f "$JOB/pgid" ] && return
		[ "$tries" -ge 600 ] && return
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

# Process groups of the job's descendants that left its group: torchrun starts each worker in a
# session of its own, and a kill must reach them too, or they outlive the job (and hold its GPUs).
descendant_groups() { # PGID
	ps -A -o pid= -o ppid= -o pgid= 2>/dev/null | awk -v g="$1" '
		{ parent[$1] = $2; group[$1] = $3 }
		END {
			for (p in group) {
				if (group[p] == g) continue
				q = parent[p]; n = 0
				while (q != "" && q + 0 > 1 && n < 64) {
					if (group[q] == g) { print group[p]; break }
					q = parent[q]; n++
				}
			}
		}' | sort -u
}

kill_job() { # GRACE_TENTHS [BY]; the lock is held
	pgid=$(get1 pgid)
	# The user's kill overrides keep-alive's group-stop even once the job is gone: keep-alive must not
	# resume what the user has given up on.
	[ -n "${2:-}" ] || rm -f "$JOB/killed_by"
	running || return 0
	put state killed
	[ -n "${2:-}" ] && put_marker killed_by "$2"
	# Found before the TERM: once their parent (torchrun) is gone they no longer lead back to the job.
	extra=$(descendant_groups "$pgid")
	echo "==== gcptui: $(now) kill: SIGTERM to process group $pgid, SIGKILL after $(($1 / 10)).$(($1 % 10))s ====" >> "$LOG"
	kill -s TERM -- "-$pgid" 2> /dev/null
	if ! wait_gone "$pgid" "$1"; then
		echo "==== gcptui: $(now) kill: still running after the grace period: SIGKILL ====" >> "$LOG"
		kill -s KILL -- "-$pgid" 2> /dev/null
		for g in $extra; do kill -s KILL -- "-$g" 2> /dev/null; done
		wait_gone "$pgid" 100
	fi
	# The job's own launcher normally ends its workers first; what it left gets the rest of the grace.
	for g in $extra; do
		wait_gone "$g" "$1" || { kill -s KILL -- "-$g" 2> /dev/null; wait_gone "$g" 100; }
	done
	# SIGKILL also ended the supervisor before it could write the exit code: record it ourselves.
	if [ ! -f "$JOB/exit_code" ]; then
		put ended_at "$(now)"
		put exit_code 137
		echo "==== gcptui: $(now) job killed (exit code 137) ====" >> "$LOG"
	fi
}

# ---- the preemption notice watcher ------------------------------------------------------------
# It runs as a background subshell of the supervisor, so IN the job's process group, deliberately:
# whatever ends the group (`kill`'s SIGTERM, the SIGKILL after the grace, a power-off) ends it too,
# and nothing of ours can outlive the job. Group membership costs two things, both handled here: its
# own SIGTERM forward reaches itself (it is done by then), and a SIGTERM to the group may be a kill or
# a VM shutting down for a preemption; GCE flips the flag before it powers off, so one quick read
# that the TERM cannot cut short tells them apart. The supervisor ends it with SIGUSR1 when the job
# ends. Every wait is `wait` on a background child, so a signal interrupts it at once.

NOTICE_WAIT_SECONDS=10 # each long-poll's timeout_sec: an orphaned watcher notices within this

PY_FETCH='import sys, urllib.request as u
url, body, head, limit = sys.argv[1:5]
try:
    with u.build_opener(u.ProxyHandler({})).open(
            u.Request(url, headers={"Metadata-Flavor": "Google"}), timeout=float(limit)) as r:
        data, etag = r.read(), r.headers.get("ETag", "")
except Exception:
    sys.exit(1)
open(body, "wb").write(data)
open(head, "w").write("ETag: %s\n" % etag)'

pick_fetcher() {
	for fetcher in ${GCPTUI_METADATA_FETCHER:-curl wget python3 python}; do
		command -v "$fetcher" > /dev/null 2>&1 && return 0
	done
	return 1
}

# GET instance/preempted plus QUERY within LIMIT seconds into $W.body and $W.head; exit 0 on HTTP 200.
# It execs the fetcher: run it in the background or a subshell, so its pid is the fetcher's.
fetch() { # QUERY LIMIT
	case $fetcher in
	curl)
		exec curl -sf -H 'Metadata-Flavor: Google' --connect-timeout 2 -m "$2" \
			-D "$W.head" -o "$W.body" "$META_URL$1" ;;
	wget) exec wget -q -S -T "$2" --header='Metadata-Flavor: Google' -O "$W.body" "$META_URL$1" 2> "$W.head" ;;
	*) exec "$fetcher" -c "$PY_FETCH" "$META_URL$1" "$W.body" "$W.head" "$2" ;;
	esac
}

# The value and ETag of the last successful fetch, in $value and $etag (builtins only).
fetched() {
	value= etag=
	[ -f "$W.body" ] && { IFS= read -r value < "$W.body" || :; }
	value=${value%"$CR"}
	[ -f "$W.head" ] || return 0
	while IFS= read -r line || [ -n "$line" ]; do
		line=${line%"$CR"}
		case $line in *[Ee][Tt][Aa][Gg]:*)
			etag=${line#*:}
			etag=${etag# }
			;;
		esac
	done < "$W.head"
	etag=${etag#\"}
	etag=${etag%\"}
	case $etag in *[!A-Za-z0-9_-]*) etag= ;; esac # it goes into a URL unescaped
}

# Sleep $1 seconds unless told to stop meanwhile.
# A child we end with SIGKILL, not SIGTERM: sent right after the fork, a SIGTERM can reach the child
# before it has dropped our traps, and is then lost (dash). A fetcher missed so would go on for its
# whole long-poll, and the job, which ends when its process group has, with it.
nap() {
	sleep "$1" &
	fpid=$!
	[ "$stop$term" = 00 ] && wait "$fpid"
	kill -s KILL "$fpid" 2> /dev/null
}

# Does $value announce the end of this VM? preempted: TRUE; maintenance-event: the host goes down for
# maintenance and a GPU VM (which cannot live-migrate) with it (TERMINATE_ON_HOST_MAINTENANCE).
announced() {
	case $key in
	preempted) [ "$value" = TRUE ] ;;
	*) case $value in TERMINATE*) return 0 ;; *) return 1 ;; esac ;;
	esac
}

preempted_now() {
	[ -f "$JOB/preempted" ] && return 0
	at=$(now)
	put preempted "$at" # either notice: the job was cut short by the VM going away
	case $key in preempted) what="preemption notice" ;; *) what="host maintenance notice ($value)" ;; esac
	echo "==== gcptui: $at $what from the metadata server: SIGTERM to process group $group ===="
	kill -s TERM -- "-$group" 2> /dev/null
}

notice_watch() { # SUPERVISOR_PID GROUP KEY (instance/KEY: preempted or maintenance-event)
	sup=$1 group=$2 key=$3 stop=0 term=0 reached=0 fails=0 polling=0 etag=
	trap 'stop=1' USR1
	trap 'term=1' TERM
	trap '' INT
	pick_fetcher || return 0
	# The metadata server is link-local: a proxy would only be in the way (and only in this subshell).
	unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY all_proxy ALL_PROXY
	META_URL="http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1/instance/$key"
	W="$JOB/.notice-$key.$$"
	CR=$(printf '\r')
	while [ "$stop$term" = 00 ] && alive "$sup"; do
		query= limit=3
		if [ "$polling" = 1 ]; then
			# last_etag: a change between our reads is answered at once, not missed.
			query="?wait_for_change=true&timeout_sec=$NOTICE_WAIT_SECONDS${etag:+&last_etag=$etag}"
			limit=$((NOTICE_WAIT_SECONDS + 10))
		fi
		fetch "$query" "$limit" &
		fpid=$!
		rc=1
		[ "$stop$term" = 00 ] && { wait "$fpid"; rc=$?; }
		if [ "$stop$term" != 00 ]; then
			kill -s KILL "$fpid" 2> /dev/null # see nap
			break
		fi
		if [ "$rc" -eq 0 ]; then
			reached=1 fails=0 polling=1
			fetched
			if announced; then
				# A Spot preemption flips maintenance-event too: give its own watcher a moment, so the
				# notice is named for what it is (maintenance gives a GPU VM about a minute, not 30 s).
				# On a loaded VM that watcher can be slower than the moment: ask instance/preempted here.
				if [ "$key" != preempted ]; then
					nap 1
					maintenance=$value
					if (trap '' TERM && META_URL=${META_URL%/*}/preempted && fetch "" 2) &&
						fetched && [ "$value" = TRUE ]; then
						key=preempted
					else
						value=$maintenance
					fi
				fi
				preempted_now
				break
			fi
			[ -n "$etag" ] || nap 1 # no ETag to wait on: at least do not spin
		else
			fails=$((fails + 1))
			# Never reached a metadata server: this is not GCE, so there is nothing to watch.
			[ "$reached" = 0 ] && [ "$fails" -ge 3 ] && break
			case $fails in 1) nap 0.5 ;; 2) nap 1 ;; 3) nap 2 ;; *) nap 5 ;; esac
		fi
	done
	# A TERM from outside: read the flag once, even when the supervisor has told us to stop meanwhile
	# (the job trapped the same TERM and exited before we got here: the race a loaded VM loses).
	if [ "$term" = 1 ] && [ "$reached" = 1 ] && [ ! -f "$JOB/preempted" ]; then
		(trap '' TERM && fetch "" 2) && fetched && announced && preempted_now
	fi
	rm -f "$W.body" "$W.head"
}

# End the notice watcher (the job has ended); USR1 again while it lives, in case one fell between its
# checks and its wait. A supervisor that got a TERM from outside passes it on first: the VM going
# down signals its processes one by one, so the job can have exited on its TERM before the watcher
# got its own, and the watcher's one last read is what names the end a preemption.
stop_watcher() {
	for w in $watchers; do
		n=0
		[ "$terminated" -eq 1 ] && kill -s TERM "$w" 2> /dev/null
		kill -s USR1 "$w" 2> /dev/null
		while alive "$w" && [ "$n" -lt 100 ]; do
			sleep 0.05
			n=$((n + 1))
			kill -s USR1 "$w" 2> /dev/null
		done
		wait "$w" 2> /dev/null
	done
	watchers=
}

# The supervisor: leader of the job's process group, waits for setup and command, records the end.
run_job() { # DIR COMMAND SETUP
	dir=$1 cmd=$2 setup=$3
	# The launch gave up waiting for us (and recorded the start as failed): not ours to run any more.
	if [ -n "${GCPTUI_LAUNCH:-}" ]; then
		mv "$GCPTUI_LAUNCH" "$GCPTUI_LAUNCH.claimed" 2> /dev/null || exit 0
		rm -f "$GCPTUI_LAUNCH.claimed"
	fi
	unset GCPTUI_LAUNCH
	put pgid $$
	# Like nohup; and TERM/INT only mark us, so we outlive the command and record its exit code.
	# (A trap with a handler is reset to the default in the commands we start; '' would be inherited.)
	trap '' HUP
	trap 'terminated=1' TERM INT
	terminated=0
	GCPTUI_METRICS="$JOB/metrics.jsonl"
	GCPTUI_JOB_DIR="$JOB"
	export GCPTUI_METRICS GCPTUI_JOB_DIR
	unset GCPTUI_ENV_IN
	# shellcheck disable=SC1091 # written by launch: quoted `export NAME=VALUE` lines
	[ -f "$JOB/env" ] && . "$JOB/env"
	# The metrics file is created private before the job's own umask applies; a relative
	# GCPTUI_METRICS is relative to DIR. `true`, not `:`: a failed redirection of a special builtin
	# would end this shell, and with it the record of the job.
	case $GCPTUI_METRICS in /*) metrics=$GCPTUI_METRICS ;; *) metrics="$dir/$GCPTUI_METRICS" ;; esac
	mkdir -p "$(dirname "$metrics")" 2> /dev/null
	true >> "$metrics" 2> /dev/null
	# After the exports: [job].env may point GCE_METADATA_HOST or GCPTUI_METADATA_FETCHER elsewhere.
	# Two watchers: a Spot VM's preemption, and host maintenance (GPU VMs cannot live-migrate).
	notice_watch $$ $$ preempted < /dev/null &
	watchers=$!
	notice_watch $$ $$ maintenance-event < /dev/null &
	watchers="$watchers $!"
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
	# Before the exit code: a notice that raced the job's end is on disk when clients read "ended".
	stop_watcher
	# The shell running the command can die of a SIGTERM while the trainer in the same group is
	# still writing its checkpoint: the job ends when its whole group has.
	while others_alive; do sleep 0.1; done
	if [ "$(get1 state)" != killed ]; then
		put state exited
		# A SIGTERM that was no `kill` of ours: the VM going down (a launcher such as torchrun then
		# exits 1, not 143). Recorded, so keep-alive resumes the job as cut short, not finished.
		[ "$terminated" -eq 1 ] && put_marker terminated "$(now)"
	fi
	put ended_at "$(now)"
	put exit_code "$rc"
	if [ -f "$JOB/preempted" ]; then
		echo "==== gcptui: $(now) job ended with exit code $rc after a preemption notice ===="
	else
		echo "==== gcptui: $(now) job ended with exit code $rc ===="
	fi
	exit "$rc"
}

# Some live process other than us is in our process group (only where /proc exists: Linux VMs).
others_alive() {
	[ -d /proc/self ] || return 1
	for f in /proc/[0-9]*/stat; do
		st=
		read -r st 2>/dev/null < "$f" || continue
		p=${f#/proc/}
		[ "${p%/stat}" = "$$" ] && continue
		# shellcheck disable=SC2086 # fields after the command name: state ppid pgrp ...
		set -- ${st##*") "}
		[ "$3" = "$$" ] && [ "$1" != Z ] && return 0
	done
	return 1
}

# Run $1 with sh -c in the foreground; the process records its own pid first, then becomes the command.
child() {
	# shellcheck disable=SC2016 # expanded by the inner sh
	# umask 022 for the job alone: what it creates (outputs, checkpoints) gets the usual modes.
	sh -c 'echo $$ > "$0.tmp" && mv -f "$0.tmp" "$0" && umask 022 && exec sh -c "$1"' "$JOB/pid" "$1"
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
	[ $# -eq 1 ] || { [ $# -eq 2 ] && [ "$2" = group-stop ]; } || exit 4
	lock
	kill_job "$@"
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
watch)
	watch_state "${1:-0.2}" "${2:-5}"
	;;
busy)
	# How many of the VM's job slots (~/.gcptui/job, job-1, ...) have a job running: auto-stop asks,
	# since a sweep's trial in slot 2 keeps the VM busy whatever slot 0's job did.
	n=0
	for JOB in "$ROOT/job" "$ROOT"/job-*; do
		[ -d "$JOB" ] || continue
		read_status && [ "$state" = running ] && n=$((n + 1))
	done
	echo "running=$n"
	;;
run)
	[ $# -ge 3 ] || exit 4
	run_job "$@"
	;;
*)
	echo "error=usage: gcptui-job.sh status|start|kill|restart|watch|busy|run ..."
	exit 4
	;;
esac
