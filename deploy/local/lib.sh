# shellcheck shell=bash
# Variables set here are read by the scripts that source this file:
# shellcheck disable=SC2034
# deploy/local/lib.sh: shared by deploy/local/{up,down,test}; source it, don't run it.
#
# Finds or starts the NATS (JetStream) and PostgreSQL servers npcmem needs on one
# machine. A server that already answers (the machine-wide dev servers on 4222 and
# 5432, or the ones named by NPCMEM_NATS_URL / NPCMEM_PG_*) is reused and never
# stopped. Otherwise a private server is started under .local/ and recorded in
# .local/run/, so that `down` (or `test`'s exit trap) stops exactly what was
# started here. docs/operations-local.md describes the variables honoured.

set -euo pipefail

NPCMEM_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
NPCMEM_LOCAL_DIR=${NPCMEM_LOCAL_DIR:-$NPCMEM_ROOT/.local}
NPCMEM_RUN_DIR=$NPCMEM_LOCAL_DIR/run
NPCMEM_LOG_DIR=$NPCMEM_LOCAL_DIR/logs
# `dev` for the long-running stack of `up`, `test` for the throwaway servers of
# `test`; the two never share a data directory, pid file or log.
NPCMEM_INSTANCE=${NPCMEM_INSTANCE:-dev}

NPCMEM_DEFAULT_NATS_URL=nats://127.0.0.1:4222
NPCMEM_DEFAULT_PG_HOST=127.0.0.1
NPCMEM_DEFAULT_PG_PORT=5432
NPCMEM_DEFAULT_PG_USER=postgres

# Set by ensure_nats / ensure_postgres: 1 when this process started the server.
NPCMEM_NATS_STARTED=0
NPCMEM_PG_STARTED=0
NPCMEM_NATS_SOURCE=
NPCMEM_PG_SOURCE=

# ---------------------------------------------------------------------------
# messages, small helpers

npcmem_log() { printf '[npcmem] %s\n' "$*" >&2; }
npcmem_warn() { printf '[npcmem] warning: %s\n' "$*" >&2; }
npcmem_die() {
	printf '[npcmem] error: %s\n' "$*" >&2
	exit 1
}

npcmem_prepare_dirs() {
	mkdir -p "$NPCMEM_RUN_DIR" "$NPCMEM_LOG_DIR"
}

# npcmem_instance_prefix INSTANCE: prefix of its record and log names: "" for
# dev, "test-" for test.
npcmem_instance_prefix() {
	local instance=$1
	if [[ $instance == dev ]]; then printf ''; else printf '%s-' "$instance"; fi
}

# npcmem_instance_data_root INSTANCE: where it keeps server data: .local/ for
# dev, .local/INSTANCE/ otherwise.
npcmem_instance_data_root() {
	local instance=$1
	if [[ $instance == dev ]]; then
		printf '%s' "$NPCMEM_LOCAL_DIR"
	else
		printf '%s/%s' "$NPCMEM_LOCAL_DIR" "$instance"
	fi
}

# Serialises up/down/test while they start or stop servers. The lock is held
# until npcmem_unlock or the end of the process.
npcmem_lock() {
	npcmem_prepare_dirs
	command -v flock >/dev/null 2>&1 || return 0
	exec {NPCMEM_LOCK_FD}>"$NPCMEM_RUN_DIR/.lock"
	if ! flock -w 300 "$NPCMEM_LOCK_FD"; then
		npcmem_die "another deploy/local command holds $NPCMEM_RUN_DIR/.lock"
	fi
}
# Children must not inherit the lock's descriptor: a long-running server holding
# it would block every later up/down/test.
npcmem_close_lock_fd() {
	if [[ -n ${NPCMEM_LOCK_FD:-} ]]; then
		exec {NPCMEM_LOCK_FD}>&-
	fi
}
npcmem_unlock() {
	if [[ -n ${NPCMEM_LOCK_FD:-} ]]; then
		exec {NPCMEM_LOCK_FD}>&-
		NPCMEM_LOCK_FD=
	fi
}

# tcp_open HOST PORT: something accepts TCP connections there.
npcmem_tcp_open() {
	# shellcheck disable=SC2016 # expanded by the inner bash
	timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null
}

# A port is taken when something listens on it or a record in .local/run
# claims it (a service we just started may not have bound it yet).
npcmem_port_taken() {
	local port=$1
	if npcmem_tcp_open 127.0.0.1 "$port"; then return 0; fi
	if [[ -d $NPCMEM_RUN_DIR ]] && grep -qsx "port=$port" "$NPCMEM_RUN_DIR"/*.env; then return 0; fi
	if [[ " ${NPCMEM_PORTS_HANDED_OUT:-} " == *" $port "* ]]; then return 0; fi
	return 1
}

# npcmem_free_port [VAR]: a free TCP port on 127.0.0.1 from 20000 up to the ephemeral range. With VAR,
# the port is stored there and also remembered so that later calls in this
# process don't hand it out again; without VAR it is printed.
npcmem_free_port() {
	# odd local names: printf -v must not hit a local that shadows the caller's VAR
	local _npcmem_fp_port _npcmem_fp_attempt _npcmem_fp_low=32768 _npcmem_fp_floor=20000
	# Below the kernel's ephemeral range: an outgoing connection cannot take the port
	# between this check and the service binding it.
	if [[ -r /proc/sys/net/ipv4/ip_local_port_range ]]; then
		read -r _npcmem_fp_low _ </proc/sys/net/ipv4/ip_local_port_range
	fi
	if ((_npcmem_fp_low - _npcmem_fp_floor < 1000)); then _npcmem_fp_floor=1024; fi
	for ((_npcmem_fp_attempt = 0; _npcmem_fp_attempt < 200; _npcmem_fp_attempt++)); do
		_npcmem_fp_port=$((_npcmem_fp_floor + (RANDOM * 32768 + RANDOM) % (_npcmem_fp_low - _npcmem_fp_floor)))
		if ! npcmem_port_taken "$_npcmem_fp_port"; then
			if [[ $# -ge 1 ]]; then
				NPCMEM_PORTS_HANDED_OUT="${NPCMEM_PORTS_HANDED_OUT:-} $_npcmem_fp_port"
				printf -v "$1" '%s' "$_npcmem_fp_port"
			else
				printf '%s\n' "$_npcmem_fp_port"
			fi
			return 0
		fi
	done
	npcmem_die "found no free TCP port on 127.0.0.1 below $_npcmem_fp_low"
}

# npcmem_record_write NAME KEY=VALUE...: .local/run/NAME.env, one KEY=VALUE a line.
npcmem_record_write() {
	local name=$1
	shift
	npcmem_prepare_dirs
	printf '%s\n' "$@" >"$NPCMEM_RUN_DIR/$name.env.tmp"
	mv "$NPCMEM_RUN_DIR/$name.env.tmp" "$NPCMEM_RUN_DIR/$name.env"
}

# npcmem_record_get NAME KEY: the value, or "" (and status 1) when missing.
npcmem_record_get() {
	local file="$NPCMEM_RUN_DIR/$1.env" line
	[[ -f $file ]] || return 1
	while IFS= read -r line; do
		if [[ $line == "$2="* ]]; then
			printf '%s' "${line#*=}"
			return 0
		fi
	done <"$file"
	return 1
}

npcmem_record_remove() {
	rm -f "$NPCMEM_RUN_DIR/$1.env" "$NPCMEM_RUN_DIR/$1.pid"
}

# npcmem_pid_matches PID WORD: PID is alive and its command line contains WORD
# (guards against a recycled pid).
npcmem_pid_matches() {
	local pid=$1 word=$2 cmdline
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	[[ -r /proc/$pid/cmdline ]] || return 1
	cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
	[[ $cmdline == *"$word"* ]]
}

# npcmem_record_alive NAME: the process recorded as NAME is still running.
npcmem_record_alive() {
	local pid match
	pid=$(cat "$NPCMEM_RUN_DIR/$1.pid" 2>/dev/null) || return 1
	match=$(npcmem_record_get "$1" match) || return 1
	npcmem_pid_matches "$pid" "$match"
}

# npcmem_stop_pid PID WORD [SECONDS]: SIGTERM, wait, then SIGKILL.
npcmem_stop_pid() {
	local pid=$1 word=$2 seconds=${3:-20} waited=0
	npcmem_pid_matches "$pid" "$word" || return 0
	kill -TERM "$pid" 2>/dev/null || return 0
	while npcmem_pid_matches "$pid" "$word"; do
		if ((waited >= seconds * 10)); then
			npcmem_warn "pid $pid ($word) ignored SIGTERM for ${seconds}s, sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			sleep 0.2
			break
		fi
		sleep 0.1
		waited=$((waited + 1))
	done
}

# npcmem_spawn LOG CMD...: start CMD in the background in its own session (so a
# Ctrl-C meant for the caller does not reach it), stdin from /dev/null, output
# appended to LOG; prints its pid. The subshell has no job control, so setsid
# never forks and $! is the command's own pid.
npcmem_spawn() {
	local log=$1
	shift
	(
		set +m
		npcmem_close_lock_fd
		setsid "$@" </dev/null >>"$log" 2>&1 &
		printf '%s\n' "$!"
	)
}

npcmem_file_size() { stat -c %s "$1" 2>/dev/null || printf '0'; }

# npcmem_log_since LOG OFFSET PATTERN: PATTERN occurs in LOG after byte OFFSET.
# (No grep -q: under pipefail its early exit would fail the pipe with SIGPIPE.)
npcmem_log_since() {
	tail -c +$(($2 + 1)) "$1" 2>/dev/null | grep -- "$3" >/dev/null
}

# npcmem_log_tail LOG OFFSET: the last lines written after OFFSET, to stderr.
npcmem_log_tail() {
	tail -c +$(($2 + 1)) "$1" 2>/dev/null | tail -n 20 >&2 || true
}

# npcmem_install_packages PKG...: apt-get install as root; otherwise say how and fail.
npcmem_install_packages() {
	if ((EUID != 0)); then
		npcmem_die "missing $*; install it with: sudo apt-get install -y $*"
	fi
	command -v apt-get >/dev/null 2>&1 ||
		npcmem_die "missing $* and no apt-get to install it; install $* by hand"
	npcmem_prepare_dirs
	local apt_log="$NPCMEM_LOG_DIR/apt.log"
	npcmem_log "installing $* with apt-get (output in $apt_log)"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y --no-install-recommends "$@" >>"$apt_log" 2>&1; then
		npcmem_log "apt-get install failed, running apt-get update and trying again"
		apt-get update >>"$apt_log" 2>&1 || true
		apt-get install -y --no-install-recommends "$@" >>"$apt_log" 2>&1 ||
			npcmem_die "apt-get install -y $* failed; see $apt_log"
	fi
}

# npcmem_http_status HOST PORT PATH: the HTTP status code of a GET, or "".
# curl when present, otherwise a raw HTTP/1.0 request over bash's /dev/tcp.
npcmem_http_status() {
	local host=$1 port=$2 path=$3
	if command -v curl >/dev/null 2>&1; then
		curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$host:$port$path" 2>/dev/null || true
		return 0
	fi
	# shellcheck disable=SC2016 # expanded by the inner bash
	timeout 3 bash -c '
		exec 3<>"/dev/tcp/$1/$2" || exit 1
		printf "GET %s HTTP/1.0\r\nHost: %s:%s\r\nConnection: close\r\n\r\n" "$3" "$1" "$2" >&3
		IFS=" " read -r _ code _ <&3 || exit 1
		printf "%s" "$code"' _ "$host" "$port" "$path" 2>/dev/null || true
}

# ---------------------------------------------------------------------------
# NATS

# npcmem_nats_hostport URL: "HOST PORT" of the first server in a NATS URL list.
npcmem_nats_hostport() {
	local rest=${1%%,*}
	rest=${rest#*://}
	rest=${rest##*@}
	rest=${rest%%/*}
	local host port
	if [[ $rest == \[*\]* ]]; then
		host=${rest%%]*}
		host=${host#[}
		port=${rest##*]}
		port=${port#:}
	elif [[ $rest == *:* ]]; then
		host=${rest%:*}
		port=${rest##*:}
	else
		host=$rest
		port=
	fi
	printf '%s %s' "${host:-127.0.0.1}" "${port:-4222}"
}

# npcmem_nats_info URL: prints the server's INFO line; fails when nothing answers.
npcmem_nats_info() {
	local host port
	read -r host port <<<"$(npcmem_nats_hostport "$1")"
	# shellcheck disable=SC2016 # expanded by the inner bash
	timeout 4 bash -c '
		exec 3<>"/dev/tcp/$1/$2" || exit 1
		IFS= read -r -t 3 line <&3 || exit 1
		[[ $line == INFO* ]] || exit 1
		printf "%s\n" "$line"' _ "$host" "$port" 2>/dev/null
}

# npcmem_nats_request URL SUBJECT PAYLOAD: one core NATS request over bash's
# /dev/tcp, printing the reply's payload (single-line JSON from the JetStream API).
# Lets up check JetStream before anything is built.
npcmem_nats_request() {
	local host port connect='{"verbose":false,"pedantic":false,"lang":"bash","version":"1"'
	read -r host port <<<"$(npcmem_nats_hostport "$1")"
	if [[ -n ${NPCMEM_NATS_USER:-} ]]; then
		connect+=",\"user\":\"$NPCMEM_NATS_USER\",\"pass\":\"${NPCMEM_NATS_PASSWORD:-}\""
	fi
	connect+='}'
	# shellcheck disable=SC2016 # expanded by the inner bash
	timeout 8 bash -c '
		exec 3<>"/dev/tcp/$1/$2" || exit 1
		IFS= read -r -t 3 line <&3 || exit 1
		inbox="_INBOX.npcmem.$RANDOM$RANDOM"
		printf "CONNECT %s\r\nSUB %s 1\r\nPUB %s %s %d\r\n%s\r\n" "$3" "$inbox" "$4" "$inbox" "${#5}" "$5" >&3
		while IFS= read -r -t 6 line <&3; do
			line=${line%$'"'"'\r'"'"'}
			case $line in
			PING) printf "PONG\r\n" >&3 ;;
			MSG*)
				IFS= read -r -t 6 payload <&3 || exit 1
				printf "%s\n" "${payload%$'"'"'\r'"'"'}"
				exit 0
				;;
			-ERR*) exit 1 ;;
			esac
		done
		exit 1' _ "$host" "$port" "$connect" "$2" "$3" 2>/dev/null
}

# The streams of this world, and what each reserves (max_bytes) in JetStream.
NPCMEM_STREAM_KINDS=(CONVERSATIONS JOBS EVENTS WORLD SIGNALS DLQ)
npcmem_stream_bytes() {
	case $1 in
	CONVERSATIONS | JOBS) printf '%s' "${NPCMEM_WORK_QUEUE_MAX_BYTES:-1073741824}" ;;
	*) printf '%s' "${NPCMEM_LIMITS_STREAM_MAX_BYTES:-1073741824}" ;;
	esac
}

# npcmem_streams_missing URL: the names of this world's streams that do not exist yet.
npcmem_streams_missing() {
	local prefix=${NPCMEM_STREAM_PREFIX:-NPCMEM} kind reply
	for kind in "${NPCMEM_STREAM_KINDS[@]}"; do
		reply=$(npcmem_nats_request "$1" "\$JS.API.STREAM.INFO.${prefix}_$kind" '') || return 1
		if [[ $reply == *'"code":404'* ]]; then printf '%s\n' "$kind"; fi
	done
}

# npcmem_streams_fit URL KIND...: whether JetStream at URL has room for the streams of
# the given kinds at NPCMEM_STREAM_REPLICAS replicas (1 by default), found by creating
# (then deleting) one probe stream that reserves as much on every server as they would.
# Prints JetStream's refusal when it has not.
npcmem_streams_fit() {
	local url=$1 need=0 kind probe reply
	shift
	for kind in "$@"; do need=$((need + $(npcmem_stream_bytes "$kind"))); done
	((need > 0)) || return 0
	probe="NPCMEM_PREFLIGHT_$RANDOM$RANDOM"
	reply=$(npcmem_nats_request "$url" "\$JS.API.STREAM.CREATE.$probe" \
		"{\"name\":\"$probe\",\"subjects\":[\"_npcmem.preflight.$probe\"],\"storage\":\"file\",\"max_bytes\":$need,\"num_replicas\":${NPCMEM_STREAM_REPLICAS:-1}}") ||
		return 0 # no answer: the services will say what is wrong
	if [[ $reply == *'"error"'* ]]; then
		printf '%s\n' "$reply" | sed -n 's/.*"description":"\([^"]*\)".*/\1/p'
		return 1
	fi
	npcmem_nats_request "$url" "\$JS.API.STREAM.DELETE.$probe" '' >/dev/null || true
	return 0
}

# npcmem_human_bytes N: "1.5 GiB" / "256 MiB".
npcmem_human_bytes() {
	if (($1 >= 1073741824)); then
		awk -v b="$1" 'BEGIN { printf "%.1f GiB", b / 1073741824 }'
	else
		printf '%d MiB' $(($1 / 1048576))
	fi
}

# npcmem_nats_usable URL: a NATS server with JetStream answers at URL.
npcmem_nats_usable() {
	local info
	info=$(npcmem_nats_info "$1") || return 1
	if [[ $info != *'"jetstream":true'* ]]; then
		npcmem_warn "the NATS server at $1 answers but has no JetStream; not using it"
		return 1
	fi
	if [[ $info == *'"auth_required":true'* && -z ${NPCMEM_NATS_USER:-} ]]; then
		npcmem_warn "the NATS server at $1 requires auth; set NPCMEM_NATS_USER and NPCMEM_NATS_PASSWORD"
	fi
	return 0
}

npcmem_nats_server_bin() {
	if [[ -n ${NPCMEM_NATS_SERVER_BIN:-} ]]; then
		[[ -x $NPCMEM_NATS_SERVER_BIN ]] || npcmem_die "NPCMEM_NATS_SERVER_BIN=$NPCMEM_NATS_SERVER_BIN is not executable"
		printf '%s' "$NPCMEM_NATS_SERVER_BIN"
		return 0
	fi
	local candidate
	for candidate in "$(command -v nats-server 2>/dev/null || true)" /usr/sbin/nats-server /usr/bin/nats-server /usr/local/bin/nats-server; do
		if [[ -n $candidate && -x $candidate ]]; then
			printf '%s' "$candidate"
			return 0
		fi
	done
	return 1
}

# npcmem_require_nats_server: prints the nats-server path, installing it if needed.
npcmem_require_nats_server() {
	if ! npcmem_nats_server_bin; then
		npcmem_install_packages nats-server
		npcmem_nats_server_bin || npcmem_die "nats-server still not found after installing it"
	fi
}

# The variables the services need for a server started from nats.conf.
npcmem_export_nats_service_credentials() {
	if [[ -z ${NPCMEM_NATS_USER:-} ]]; then
		[[ -n ${NPCMEM_NATS_SERVICE_PASSWORD:-} ]] ||
			npcmem_die "the private NATS runs nats.conf: set NPCMEM_NATS_SERVICE_PASSWORD (or NPCMEM_NATS_USER and NPCMEM_NATS_PASSWORD)"
		export NPCMEM_NATS_USER=service
		export NPCMEM_NATS_PASSWORD=$NPCMEM_NATS_SERVICE_PASSWORD
	fi
}

# npcmem_use_private_nats NAME: adopt a recorded private server if it still runs.
npcmem_use_private_nats() {
	local name=$1 url
	npcmem_record_alive "$name" || return 1
	url=$(npcmem_record_get "$name" url) || return 1
	npcmem_nats_info "$url" >/dev/null || return 1
	export NPCMEM_NATS_URL=$url
	if [[ $(npcmem_record_get "$name" auth || true) == 1 ]]; then
		npcmem_export_nats_service_credentials
	fi
	return 0
}

# ensure_nats: export NPCMEM_NATS_URL for a running NATS server with JetStream.
# Order: an explicitly set NPCMEM_NATS_URL that answers; a private server
# started earlier (this instance's, or up's); the shared nats://127.0.0.1:4222;
# a new private server. NPCMEM_NATS_AUTH=1 (dev instance only) asks for a
# private server running nats.conf instead of the unauthenticated shared one.
# NPCMEM_PRIVATE_SERVERS=1 skips every reuse but this instance's own server.
ensure_nats() {
	npcmem_prepare_dirs
	local want_auth=0 own name private_only=${NPCMEM_PRIVATE_SERVERS:-0}
	if [[ ${NPCMEM_NATS_AUTH:-0} == 1 && $NPCMEM_INSTANCE == dev ]]; then want_auth=1; fi
	own="$(npcmem_instance_prefix "$NPCMEM_INSTANCE")nats"

	if [[ $private_only == 1 ]]; then
		npcmem_log "NPCMEM_PRIVATE_SERVERS=1: not reusing shared or explicitly named NATS servers"
	elif [[ -n ${NPCMEM_NATS_URL:-} ]] && npcmem_nats_usable "$NPCMEM_NATS_URL"; then
		NPCMEM_NATS_SOURCE="existing server (NPCMEM_NATS_URL)"
		export NPCMEM_NATS_URL
		return 0
	fi
	if [[ $private_only != 1 && -n ${NPCMEM_NATS_URL:-} ]]; then
		npcmem_log "nothing usable answers at NPCMEM_NATS_URL=$NPCMEM_NATS_URL"
	fi

	for name in "$own" nats; do
		if [[ $private_only == 1 && $name != "$own" ]]; then continue; fi
		if ! npcmem_record_alive "$name"; then continue; fi
		local auth
		auth=$(npcmem_record_get "$name" auth || printf 0)
		if [[ $auth != "$want_auth" ]]; then
			if [[ $name == "$own" ]]; then
				npcmem_die "the private NATS server started earlier runs with NPCMEM_NATS_AUTH=$auth; run deploy/local/down first to switch"
			fi
			continue
		fi
		if npcmem_use_private_nats "$name"; then
			if [[ $name == "$own" && $NPCMEM_INSTANCE != dev ]]; then
				# a leftover of an interrupted run of this instance: ours to stop now
				NPCMEM_NATS_STARTED=1
				npcmem_record_set_owner "$name"
			fi
			NPCMEM_NATS_SOURCE="private server started earlier (pid $(cat "$NPCMEM_RUN_DIR/$name.pid"), log $(npcmem_record_get "$name" log))"
			return 0
		fi
	done

	if [[ $private_only != 1 && -z ${NPCMEM_NATS_URL:-} && $want_auth == 0 ]] &&
		npcmem_nats_usable "$NPCMEM_DEFAULT_NATS_URL"; then
		export NPCMEM_NATS_URL=$NPCMEM_DEFAULT_NATS_URL
		NPCMEM_NATS_SOURCE="shared server"
		return 0
	fi

	npcmem_start_private_nats "$want_auth"
}

npcmem_record_set_owner() {
	local file="$NPCMEM_RUN_DIR/$1.env"
	[[ -f $file ]] || return 0
	grep -v '^owner=' "$file" >"$file.tmp" || true
	printf 'owner=%s\n' "$$" >>"$file.tmp"
	mv "$file.tmp" "$file"
}

# npcmem_start_private_nats AUTH: start nats-server with JetStream on a free port.
npcmem_start_private_nats() {
	local want_auth=$1 bin name data log port pid attempt offset url
	bin=$(npcmem_require_nats_server)
	name="$(npcmem_instance_prefix "$NPCMEM_INSTANCE")nats"
	data="$(npcmem_instance_data_root "$NPCMEM_INSTANCE")/nats/data"
	log="$NPCMEM_LOG_DIR/$name.log"
	if [[ $NPCMEM_INSTANCE != dev ]]; then
		rm -rf "$data" # a test server starts empty
	fi
	mkdir -p "$data"

	local -a config_args=()
	if [[ $want_auth == 1 ]]; then
		local var
		for var in NPCMEM_NATS_GAME_PASSWORD NPCMEM_NATS_SERVICE_PASSWORD NPCMEM_NATS_ADMIN_PASSWORD; do
			[[ -n ${!var:-} ]] || npcmem_die "NPCMEM_NATS_AUTH=1 needs $var set (see nats.conf)"
		done
		config_args=(-c "$NPCMEM_ROOT/nats.conf")
	fi

	for ((attempt = 1; attempt <= 3; attempt++)); do
		npcmem_free_port port
		url="nats://127.0.0.1:$port"
		offset=$(npcmem_file_size "$log")
		npcmem_log "starting a private nats-server on $url (data $data, log $log)"
		pid=$(npcmem_spawn "$log" "$bin" "${config_args[@]}" -js -sd "$data" -a 127.0.0.1 -p "$port" -l "$log")
		printf '%s\n' "$pid" >"$NPCMEM_RUN_DIR/$name.pid"
		npcmem_record_write "$name" kind=nats instance="$NPCMEM_INSTANCE" match=nats-server \
			url="$url" port="$port" data="$data" log="$log" auth="$want_auth" owner="$$"
		if npcmem_wait_nats_ready "$pid" "$url" "$log" "$offset"; then
			export NPCMEM_NATS_URL=$url
			NPCMEM_NATS_STARTED=1
			NPCMEM_NATS_SOURCE="private server started now (pid $pid, log $log)"
			if [[ $want_auth == 1 ]]; then npcmem_export_nats_service_credentials; fi
			return 0
		fi
		npcmem_stop_pid "$pid" nats-server 5
		npcmem_record_remove "$name"
		if ! npcmem_log_since "$log" "$offset" 'address already in use'; then
			break
		fi
		npcmem_log "port $port was taken meanwhile, trying another"
	done
	npcmem_log_tail "$log" "$offset"
	npcmem_die "the private nats-server did not start; see $log"
}

# npcmem_wait_nats_ready PID URL LOG OFFSET: the server logged that it listens
# (in the part of LOG written after OFFSET) and answers with INFO.
npcmem_wait_nats_ready() {
	local pid=$1 url=$2 log=$3 offset=$4 tries
	for ((tries = 0; tries < 200; tries++)); do
		# Just after the spawn the pid may still be the shell that is about to exec
		# nats-server: only a process that is gone, or still not nats-server after a
		# second, has failed.
		if ! kill -0 "$pid" 2>/dev/null; then return 1; fi
		if ! npcmem_pid_matches "$pid" nats-server; then
			if ((tries >= 10)); then return 1; fi
			sleep 0.1
			continue
		fi
		if npcmem_log_since "$log" "$offset" 'Listening for client connections on' &&
			npcmem_nats_info "$url" >/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	npcmem_warn "nats-server (pid $pid) not ready after 20s"
	return 1
}

# ---------------------------------------------------------------------------
# PostgreSQL

# The admin connection is kept in pieces (host, port, user, password); URLs are
# built from them. NPCMEM_PG_ADMIN_URL, when set, is parsed into the pieces.
npcmem_pg_parse_admin_url() {
	local url=$1
	local re='^postgres(ql)?://(([^:@/]*)(:([^@/]*))?@)?([^:/?]+)(:([0-9]+))?(/([^?]*))?(\?.*)?$'
	[[ $url =~ $re ]] || npcmem_die "cannot parse NPCMEM_PG_ADMIN_URL=$url (want postgres://USER[:PASSWORD]@HOST:PORT/DB)"
	NPCMEM_PG_USER=${BASH_REMATCH[3]:-$NPCMEM_DEFAULT_PG_USER}
	NPCMEM_PG_PASSWORD=${BASH_REMATCH[5]:-${NPCMEM_PG_PASSWORD:-}}
	NPCMEM_PG_HOST=${BASH_REMATCH[6]}
	NPCMEM_PG_PORT=${BASH_REMATCH[8]:-5432}
}

# pg_url DB: postgres://USER[:PASSWORD]@HOST:PORT/DB for the server in use.
pg_url() {
	printf 'postgres://%s%s@%s:%s/%s' "$NPCMEM_PG_USER" "${NPCMEM_PG_PASSWORD:+:$NPCMEM_PG_PASSWORD}" \
		"$NPCMEM_PG_HOST" "$NPCMEM_PG_PORT" "$1"
}

# npcmem_psql_at HOST PORT USER PASSWORD DB ARGS...
npcmem_psql_at() {
	local host=$1 port=$2 user=$3 password=$4 db=$5
	shift 5
	PGPASSWORD=$password PGCONNECT_TIMEOUT=5 psql -X -w -q -v ON_ERROR_STOP=1 \
		-h "$host" -p "$port" -U "$user" -d "$db" "$@"
}

# pg_psql DB ARGS...: psql against the server in use.
pg_psql() {
	local db=$1
	shift
	npcmem_psql_at "$NPCMEM_PG_HOST" "$NPCMEM_PG_PORT" "$NPCMEM_PG_USER" "${NPCMEM_PG_PASSWORD:-}" "$db" "$@"
}

npcmem_require_psql() {
	command -v psql >/dev/null 2>&1 && return 0
	npcmem_install_packages postgresql-client
	command -v psql >/dev/null 2>&1 || npcmem_die "psql still not found after installing postgresql-client"
}

# npcmem_pg_answers HOST PORT USER PASSWORD: we can log in and run `select 1`.
npcmem_pg_answers() {
	local out
	out=$(npcmem_psql_at "$1" "$2" "$3" "$4" postgres -Atc 'select 1' 2>&1) && [[ $out == 1 ]] && return 0
	if command -v pg_isready >/dev/null 2>&1 && pg_isready -q -h "$1" -p "$2" -t 3; then
		npcmem_warn "PostgreSQL at $1:$2 answers but refuses user $3: ${out//$'\n'/ }"
	fi
	return 1
}

npcmem_export_pg() {
	export NPCMEM_PG_HOST NPCMEM_PG_PORT NPCMEM_PG_USER
	if [[ -n ${NPCMEM_PG_PASSWORD:-} ]]; then export NPCMEM_PG_PASSWORD; fi
	NPCMEM_PG_ADMIN_URL=$(pg_url postgres)
	export NPCMEM_PG_ADMIN_URL
}

# npcmem_use_private_pg NAME: adopt a recorded private cluster if it still runs.
npcmem_use_private_pg() {
	local name=$1 host port user
	npcmem_record_alive "$name" || return 1
	host=$(npcmem_record_get "$name" host) || return 1
	port=$(npcmem_record_get "$name" port) || return 1
	user=$(npcmem_record_get "$name" user) || return 1
	npcmem_pg_answers "$host" "$port" "$user" "" || return 1
	NPCMEM_PG_HOST=$host NPCMEM_PG_PORT=$port NPCMEM_PG_USER=$user NPCMEM_PG_PASSWORD=
	npcmem_export_pg
}

# ensure_postgres: export NPCMEM_PG_HOST/PORT/USER[/PASSWORD] and
# NPCMEM_PG_ADMIN_URL for a running PostgreSQL server where USER may create
# databases. Order: an explicitly configured server (NPCMEM_PG_ADMIN_URL, or
# NPCMEM_PG_HOST/NPCMEM_PG_PORT) that answers; a private cluster started
# earlier (this instance's, or up's); the shared 127.0.0.1:5432; a new private
# cluster. NPCMEM_PRIVATE_SERVERS=1 skips every reuse but this instance's own.
ensure_postgres() {
	npcmem_prepare_dirs
	npcmem_require_psql
	local explicit=0 own name private_only=${NPCMEM_PRIVATE_SERVERS:-0}
	own="$(npcmem_instance_prefix "$NPCMEM_INSTANCE")postgres"
	if [[ -n ${NPCMEM_PG_ADMIN_URL:-} ]]; then
		explicit=1
		npcmem_pg_parse_admin_url "$NPCMEM_PG_ADMIN_URL"
	elif [[ -n ${NPCMEM_PG_HOST:-} || -n ${NPCMEM_PG_PORT:-} ]]; then
		explicit=1
	fi
	NPCMEM_PG_HOST=${NPCMEM_PG_HOST:-$NPCMEM_DEFAULT_PG_HOST}
	NPCMEM_PG_PORT=${NPCMEM_PG_PORT:-$NPCMEM_DEFAULT_PG_PORT}
	NPCMEM_PG_USER=${NPCMEM_PG_USER:-$NPCMEM_DEFAULT_PG_USER}
	NPCMEM_PG_PASSWORD=${NPCMEM_PG_PASSWORD:-}

	if [[ $private_only == 1 ]]; then
		npcmem_log "NPCMEM_PRIVATE_SERVERS=1: not reusing shared or explicitly named PostgreSQL servers"
	elif [[ $explicit == 1 ]]; then
		if npcmem_pg_answers "$NPCMEM_PG_HOST" "$NPCMEM_PG_PORT" "$NPCMEM_PG_USER" "$NPCMEM_PG_PASSWORD"; then
			NPCMEM_PG_SOURCE="existing server (NPCMEM_PG_*)"
			npcmem_export_pg
			return 0
		fi
		npcmem_log "nothing usable answers at $NPCMEM_PG_HOST:$NPCMEM_PG_PORT (NPCMEM_PG_*)"
	fi

	for name in "$own" postgres; do
		if [[ $private_only == 1 && $name != "$own" ]]; then continue; fi
		if npcmem_use_private_pg "$name"; then
			if [[ $name == "$own" && $NPCMEM_INSTANCE != dev ]]; then
				NPCMEM_PG_STARTED=1
				npcmem_record_set_owner "$name"
			fi
			NPCMEM_PG_SOURCE="private cluster started earlier (pid $(cat "$NPCMEM_RUN_DIR/$name.pid"), data $(npcmem_record_get "$name" data))"
			return 0
		fi
	done

	if [[ $private_only != 1 && $explicit == 0 ]] &&
		npcmem_pg_answers "$NPCMEM_PG_HOST" "$NPCMEM_PG_PORT" "$NPCMEM_PG_USER" "$NPCMEM_PG_PASSWORD"; then
		NPCMEM_PG_SOURCE="shared server"
		npcmem_export_pg
		return 0
	fi

	npcmem_start_private_postgres "$explicit"
}

# npcmem_pg_bindir: directory holding initdb, pg_ctl and postgres.
npcmem_pg_bindir() {
	if [[ -n ${NPCMEM_PG_BINDIR:-} ]]; then
		[[ -x $NPCMEM_PG_BINDIR/initdb ]] || npcmem_die "no initdb in NPCMEM_PG_BINDIR=$NPCMEM_PG_BINDIR"
		printf '%s' "$NPCMEM_PG_BINDIR"
		return 0
	fi
	local newest
	newest=$(find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -path '*/bin/initdb' 2>/dev/null | sort -V | tail -n 1)
	if [[ -n $newest ]]; then
		printf '%s' "${newest%/initdb}"
		return 0
	fi
	if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
		newest=$(readlink -f "$(command -v initdb)")
		printf '%s' "${newest%/initdb}"
		return 0
	fi
	return 1
}

# Runs a command as the cluster's owner: `postgres` when we are root (initdb
# and postgres refuse to run as root), ourselves otherwise. From / so that an
# unreadable working directory does not bother it.
npcmem_pg_run() {
	local run_as=$1
	shift
	if [[ $run_as == "$(id -un)" ]]; then
		(npcmem_close_lock_fd && cd / && "$@")
	else
		(npcmem_close_lock_fd && cd / && runuser -u "$run_as" -- "$@")
	fi
}

# npcmem_pg_short_hash: a short stable id of this checkout (for /tmp paths).
npcmem_pg_short_hash() {
	printf '%s' "$NPCMEM_LOCAL_DIR" | sha256sum | cut -c1-12
}

# npcmem_pg_fallback_dir INSTANCE: the /tmp directory used when the postgres
# user cannot reach the project directory.
npcmem_pg_fallback_dir() {
	local instance=$1 suffix=
	if [[ $instance != dev ]]; then suffix="-$instance"; fi
	printf '/tmp/npcmem-pg-%s%s' "$(npcmem_pg_short_hash)" "$suffix"
}

# npcmem_start_private_postgres EXPLICIT: initdb (once) and start a cluster on
# 127.0.0.1 and a free port, trust auth, superuser `postgres`.
npcmem_start_private_postgres() {
	local explicit=$1 bindir run_as name base data log port attempt offset pid
	if ! bindir=$(npcmem_pg_bindir); then
		npcmem_install_packages postgresql
		# Debian's package may have started its own cluster on 5432 meanwhile
		if [[ $explicit == 0 && ${NPCMEM_PRIVATE_SERVERS:-0} != 1 ]] && npcmem_pg_answers "$NPCMEM_DEFAULT_PG_HOST" "$NPCMEM_DEFAULT_PG_PORT" "$NPCMEM_DEFAULT_PG_USER" ""; then
			NPCMEM_PG_HOST=$NPCMEM_DEFAULT_PG_HOST NPCMEM_PG_PORT=$NPCMEM_DEFAULT_PG_PORT
			NPCMEM_PG_USER=$NPCMEM_DEFAULT_PG_USER NPCMEM_PG_PASSWORD=
			NPCMEM_PG_SOURCE="shared server (started by the postgresql package)"
			npcmem_export_pg
			return 0
		fi
		bindir=$(npcmem_pg_bindir) || npcmem_die "initdb still not found after installing postgresql"
	fi

	run_as=$(id -un)
	if ((EUID == 0)); then
		id postgres >/dev/null 2>&1 ||
			npcmem_die "no 'postgres' user to run PostgreSQL as (initdb refuses root); apt-get install -y postgresql creates it"
		run_as=postgres
	fi

	name="$(npcmem_instance_prefix "$NPCMEM_INSTANCE")postgres"
	base="$(npcmem_instance_data_root "$NPCMEM_INSTANCE")/pg"
	log="$NPCMEM_LOG_DIR/$name.log"
	mkdir -p "$base"
	if [[ $run_as != "$(id -un)" ]]; then
		chown "$run_as:" "$base"
		chmod 700 "$base"
		if ! runuser -u "$run_as" -- test -w "$base" -a -x "$base" 2>/dev/null; then
			# a parent directory (e.g. /root) is closed to the postgres user
			rmdir "$base" 2>/dev/null || true
			base=$(npcmem_pg_fallback_dir "$NPCMEM_INSTANCE")
			log="$base/postgres.log"
			mkdir -p "$base"
			chown "$run_as:" "$base"
			chmod 700 "$base"
			ln -sfn "$log" "$NPCMEM_LOG_DIR/$name.log"
			npcmem_log "note: user $run_as cannot reach $NPCMEM_LOCAL_DIR, so the cluster lives in $base (log linked from $NPCMEM_LOG_DIR/$name.log)"
		fi
	fi
	data="$base/data"

	if [[ $NPCMEM_INSTANCE != dev && -d $data ]]; then
		npcmem_pg_run "$run_as" "$bindir/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
		rm -rf "$data" # a test cluster starts empty
	fi
	npcmem_pg_initdb "$run_as" "$bindir" "$data"

	touch "$log"
	if [[ $run_as != "$(id -un)" && ! -L $log ]]; then chown "$run_as:" "$log"; fi
	for ((attempt = 1; attempt <= 3; attempt++)); do
		npcmem_free_port port
		offset=$(npcmem_file_size "$log")
		npcmem_log "starting a private PostgreSQL on 127.0.0.1:$port (data $data, log $log)"
		if npcmem_pg_run "$run_as" "$bindir/pg_ctl" -D "$data" -l "$log" -w -t 60 -o "-p $port" start >/dev/null; then
			pid=$(head -n 1 "$data/postmaster.pid")
			printf '%s\n' "$pid" >"$NPCMEM_RUN_DIR/$name.pid"
			npcmem_record_write "$name" kind=postgres instance="$NPCMEM_INSTANCE" match=postgres \
				host=127.0.0.1 port="$port" user=postgres data="$data" bindir="$bindir" \
				run_as="$run_as" log="$log" owner="$$"
			if npcmem_wait_pg_ready "$port"; then
				NPCMEM_PG_HOST=127.0.0.1 NPCMEM_PG_PORT=$port NPCMEM_PG_USER=postgres NPCMEM_PG_PASSWORD=
				NPCMEM_PG_STARTED=1
				NPCMEM_PG_SOURCE="private cluster started now (pid $pid, data $data, log $log)"
				npcmem_export_pg
				return 0
			fi
			npcmem_stop_private_postgres "$name"
		fi
		if ! npcmem_log_since "$log" "$offset" 'Address already in use'; then
			break
		fi
		npcmem_log "port $port was taken meanwhile, trying another"
	done
	npcmem_log_tail "$log" "$offset"
	npcmem_die "the private PostgreSQL did not start; see $log"
}

# npcmem_pg_initdb RUN_AS BINDIR DATA: create the cluster unless it exists.
npcmem_pg_initdb() {
	local run_as=$1 bindir=$2 data=$3 version
	if [[ -f $data/PG_VERSION ]]; then
		version=$("$bindir/postgres" --version | grep -oE '[0-9]+' | head -n 1)
		if [[ $(cat "$data/PG_VERSION") != "$version" ]]; then
			npcmem_die "$data was made by PostgreSQL $(cat "$data/PG_VERSION"), not $version; remove it (deploy/local/down --purge)"
		fi
		return 0
	fi
	npcmem_log "initdb $data"
	mkdir -p "$data"
	if [[ $run_as != "$(id -un)" ]]; then chown "$run_as:" "$data"; fi
	chmod 700 "$data"
	local initdb_log
	initdb_log="$NPCMEM_LOG_DIR/$(npcmem_instance_prefix "$NPCMEM_INSTANCE")initdb.log"
	if ! npcmem_pg_run "$run_as" "$bindir/initdb" -D "$data" -U postgres -A trust -E UTF8 --locale=C -N \
		>"$initdb_log" 2>&1; then
		cat "$initdb_log" >&2
		npcmem_die "initdb failed (see $initdb_log)"
	fi
	# TCP on loopback only; no Unix socket, so /var/run/postgresql need not exist.
	local -a settings=(
		"listen_addresses = '127.0.0.1'"
		"unix_socket_directories = ''"
		"max_connections = 200"
	)
	if [[ $NPCMEM_INSTANCE != dev ]]; then
		# a test cluster is thrown away: durability buys nothing
		settings+=("fsync = off" "synchronous_commit = off" "full_page_writes = off")
	fi
	printf '\n# npcmem deploy/local\n' >>"$data/postgresql.conf"
	printf '%s\n' "${settings[@]}" >>"$data/postgresql.conf"
}

npcmem_wait_pg_ready() {
	local port=$1 tries
	for ((tries = 0; tries < 100; tries++)); do
		if npcmem_psql_at 127.0.0.1 "$port" postgres "" postgres -Atc 'select 1' >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.2
	done
	npcmem_warn "PostgreSQL on port $port not ready after 20s"
	return 1
}

# npcmem_stop_private_postgres NAME: pg_ctl stop (fast), falling back to signals.
npcmem_stop_private_postgres() {
	local name=$1 data bindir run_as pid
	data=$(npcmem_record_get "$name" data || true)
	bindir=$(npcmem_record_get "$name" bindir || true)
	run_as=$(npcmem_record_get "$name" run_as || true)
	pid=$(cat "$NPCMEM_RUN_DIR/$name.pid" 2>/dev/null || true)
	if [[ -n $data && -n $bindir && -n $run_as && -f $data/postmaster.pid ]]; then
		npcmem_pg_run "$run_as" "$bindir/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null 2>&1 || true
	fi
	if [[ -n $pid ]]; then npcmem_stop_pid "$pid" postgres 30; fi
	npcmem_record_remove "$name"
}

# create_database NAME: CREATE DATABASE unless it exists (idempotent).
create_database() {
	local db=$1
	[[ $db =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || npcmem_die "refusing database name '$db' (letters, digits, _ only)"
	local exists
	exists=$(pg_psql postgres -Atc "select 1 from pg_database where datname = '$db'")
	if [[ $exists == 1 ]]; then
		return 0
	fi
	if ! pg_psql postgres -c "create database \"$db\"" >/dev/null 2>&1; then
		# lost a race with another creator, or a real error
		exists=$(pg_psql postgres -Atc "select 1 from pg_database where datname = '$db'")
		[[ $exists == 1 ]] || pg_psql postgres -c "create database \"$db\""
	fi
	npcmem_log "created database $db"
}

# ---------------------------------------------------------------------------
# stopping what was recorded

# npcmem_stop_record NAME: stop whatever .local/run/NAME.env describes and
# forget it. Returns 0 also when it was no longer running.
npcmem_stop_record() {
	local name=$1 kind pid match
	kind=$(npcmem_record_get "$name" kind || true)
	pid=$(cat "$NPCMEM_RUN_DIR/$name.pid" 2>/dev/null || true)
	match=$(npcmem_record_get "$name" match || true)
	case $kind in
	postgres)
		if npcmem_record_alive "$name"; then npcmem_log "stopping PostgreSQL $name (pid $pid)"; fi
		npcmem_stop_private_postgres "$name"
		;;
	*)
		if [[ -n $pid && -n $match ]] && npcmem_pid_matches "$pid" "$match"; then
			npcmem_log "stopping $name (pid $pid)"
			npcmem_stop_pid "$pid" "$match" "${NPCMEM_STOP_TIMEOUT:-20}"
		fi
		npcmem_record_remove "$name"
		;;
	esac
}

# npcmem_stop_started_servers: stop the private servers this process started
# (used by `test` on exit).
npcmem_stop_started_servers() {
	local prefix
	prefix=$(npcmem_instance_prefix "$NPCMEM_INSTANCE")
	if [[ $NPCMEM_NATS_STARTED == 1 ]]; then
		npcmem_stop_record "${prefix}nats"
		NPCMEM_NATS_STARTED=0
	fi
	if [[ $NPCMEM_PG_STARTED == 1 ]]; then
		npcmem_stop_record "${prefix}postgres"
		NPCMEM_PG_STARTED=0
	fi
}
