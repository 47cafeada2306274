# shellcheck shell=bash
# Variables set here are read by the scripts that source this file:
# shellcheck disable=SC2034
# deploy/cluster/lib.sh: shared by deploy/cluster/{up,down}; source it, don't run it.
#
# A three-node NATS JetStream cluster on loopback, owned by this checkout, with
# everything it needs kept apart from deploy/local's world: records, logs and
# JetStream stores live under .local/cluster/ (NPCMEM_CLUSTER_DIR), so the two
# can run side by side and deploy/local/down never touches the cluster.
# deploy/local/lib.sh provides the rest (records, spawning, PostgreSQL).

NPCMEM_CLUSTER_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
# deploy/local/lib.sh keeps its records, logs and private servers under
# NPCMEM_LOCAL_DIR; pointing it at the cluster's directory keeps the worlds apart.
NPCMEM_LOCAL_DIR=${NPCMEM_CLUSTER_DIR:-$NPCMEM_CLUSTER_ROOT/.local/cluster}
# The long-running kind of world: PostgreSQL, if private, keeps its data and fsync.
NPCMEM_INSTANCE=dev
# shellcheck source=deploy/local/lib.sh
source "$NPCMEM_CLUSTER_ROOT/deploy/local/lib.sh"

NPCMEM_CLUSTER_NAME=npcmem-cluster
NPCMEM_CLUSTER_NODES=(1 2 3)
NPCMEM_CLUSTER_NATS_DIR=$NPCMEM_LOCAL_DIR/nats

# Node N listens on BASE + N - 1 for clients, routes and monitoring.
cluster_client_port() { printf '%s' $((${NPCMEM_CLUSTER_CLIENT_PORT:-4301} + $1 - 1)); }
cluster_route_port() { printf '%s' $((${NPCMEM_CLUSTER_ROUTE_PORT:-6301} + $1 - 1)); }
cluster_monitor_port() { printf '%s' $((${NPCMEM_CLUSTER_MONITOR_PORT:-8301} + $1 - 1)); }
cluster_node_name() { printf 'n%s' "$1"; }
cluster_node_record() { printf 'nats-n%s' "$1"; }
cluster_node_url() { printf 'nats://127.0.0.1:%s' "$(cluster_client_port "$1")"; }
cluster_node_config() { printf '%s/n%s.conf' "$NPCMEM_CLUSTER_NATS_DIR" "$1"; }

# cluster_write_config N: the node's configuration file (routes to all three; a
# node recognises and drops the route to itself).
cluster_write_config() {
	local node=$1 routes='' other
	for other in "${NPCMEM_CLUSTER_NODES[@]}"; do
		routes+="${routes:+, }nats-route://127.0.0.1:$(cluster_route_port "$other")"
	done
	mkdir -p "$NPCMEM_CLUSTER_NATS_DIR/n$node"
	cat >"$(cluster_node_config "$node")" <<EOF
# Written by deploy/cluster/up: node $node of the loopback cluster.
server_name: $(cluster_node_name "$node")
listen: 127.0.0.1:$(cluster_client_port "$node")
http: 127.0.0.1:$(cluster_monitor_port "$node")
jetstream {
  store_dir: "$NPCMEM_CLUSTER_NATS_DIR/n$node"
  max_file_store: ${NPCMEM_CLUSTER_MAX_FILE_STORE:-1073741824}
}
cluster {
  name: $NPCMEM_CLUSTER_NAME
  listen: 127.0.0.1:$(cluster_route_port "$node")
  routes: [$routes]
}
EOF
}

# cluster_node_alive N: the node recorded as N still runs.
cluster_node_alive() {
	npcmem_record_alive "$(cluster_node_record "$1")"
}

# cluster_start_node N: start the node unless it runs; fails when one of its ports
# is held by something else.
cluster_start_node() {
	local node=$1 name bin config log port pid offset url
	name=$(cluster_node_record "$node")
	url=$(cluster_node_url "$node")
	if cluster_node_alive "$node"; then
		npcmem_log "NATS node $(cluster_node_name "$node") already running (pid $(cat "$NPCMEM_RUN_DIR/$name.pid"), $url)"
		return 0
	fi
	npcmem_record_remove "$name"
	for port in "$(cluster_client_port "$node")" "$(cluster_route_port "$node")" "$(cluster_monitor_port "$node")"; do
		if npcmem_tcp_open 127.0.0.1 "$port"; then
			npcmem_die "port $port (node $(cluster_node_name "$node")) is taken; choose other ports with NPCMEM_CLUSTER_CLIENT_PORT, NPCMEM_CLUSTER_ROUTE_PORT, NPCMEM_CLUSTER_MONITOR_PORT"
		fi
	done
	bin=$(npcmem_require_nats_server)
	config=$(cluster_node_config "$node")
	cluster_write_config "$node"
	log="$NPCMEM_LOG_DIR/$name.log"
	offset=$(npcmem_file_size "$log")
	pid=$(npcmem_spawn "$log" "$bin" -c "$config" -l "$log")
	printf '%s\n' "$pid" >"$NPCMEM_RUN_DIR/$name.pid"
	# The configuration path is on the command line of this node alone.
	npcmem_record_write "$name" kind=nats instance=dev match="$config" url="$url" \
		port="$(cluster_client_port "$node")" route_port="$(cluster_route_port "$node")" \
		monitor_port="$(cluster_monitor_port "$node")" data="$NPCMEM_CLUSTER_NATS_DIR/n$node" log="$log"
	if ! npcmem_wait_nats_ready "$pid" "$url" "$log" "$offset"; then
		npcmem_log_tail "$log" "$offset"
		npcmem_stop_pid "$pid" "$config" 5
		npcmem_record_remove "$name"
		npcmem_die "NATS node $(cluster_node_name "$node") did not start; see $log"
	fi
	npcmem_log "started NATS node $(cluster_node_name "$node") (pid $pid, $url)"
}

# cluster_meta_leader N: the JetStream meta leader node N knows of (monitoring /jsz), or "".
cluster_meta_leader() {
	local port jsz re='"meta_cluster":\{[^}]*"leader":"([^"]+)"'
	port=$(cluster_monitor_port "$1")
	# shellcheck disable=SC2016 # expanded by the inner bash
	jsz=$(timeout 3 bash -c '
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf "GET /jsz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3
		cat <&3' _ "$port" 2>/dev/null) || return 0
	jsz=${jsz//$'\n'/}
	jsz=${jsz//[[:space:]]/}
	if [[ $jsz =~ $re ]]; then printf '%s' "${BASH_REMATCH[1]}"; fi
	return 0
}

# cluster_wait_jetstream SECONDS: every node answers /healthz with 200 and knows
# the same meta leader (JetStream placement and stream creation need one).
cluster_wait_jetstream() {
	local seconds=$1 deadline node leader status first
	deadline=$((SECONDS + seconds))
	while :; do
		first=''
		for node in "${NPCMEM_CLUSTER_NODES[@]}"; do
			status=$(npcmem_http_status 127.0.0.1 "$(cluster_monitor_port "$node")" /healthz)
			leader=$(cluster_meta_leader "$node")
			if [[ $status != 200 || -z $leader ]] || [[ -n $first && $leader != "$first" ]]; then
				first=''
				break
			fi
			first=$leader
		done
		if [[ -n $first ]]; then
			NPCMEM_CLUSTER_META_LEADER=$first
			return 0
		fi
		if ((SECONDS >= deadline)); then
			npcmem_warn "the JetStream cluster has no meta leader after ${seconds}s (node $(cluster_node_name "$node"): /healthz ${status:-no answer}, leader ${leader:-none})"
			return 1
		fi
		sleep 0.2
	done
}

# cluster_stream_placement NAME: "leader n2, replicas n1 (current), n3 (current)"
# from $JS.API.STREAM.INFO, or why not.
cluster_stream_placement() {
	local reply cluster leader replicas='' peer name current count
	reply=$(npcmem_nats_request "$(cluster_node_url 1)" "\$JS.API.STREAM.INFO.$1" '') || {
		printf 'no answer'
		return 0
	}
	if [[ $reply == *'"error"'* ]]; then
		printf '%s' "$(printf '%s\n' "$reply" | sed -n 's/.*"description":"\([^"]*\)".*/\1/p')"
		return 0
	fi
	count=$(printf '%s\n' "$reply" | sed -n 's/.*"num_replicas":\([0-9]*\).*/\1/p')
	cluster=${reply#*\"cluster\":}
	leader=$(printf '%s\n' "$cluster" | sed -n 's/^{[^}]*"leader":"\([^"]*\)".*/\1/p')
	while IFS= read -r peer; do
		[[ -n $peer ]] || continue
		name=${peer#*\"name\":\"}
		name=${name%%\"*}
		current=${peer#*\"current\":}
		current=${current%%[,\}]*}
		if [[ $current == true ]]; then current=current; else current='not current'; fi
		replicas+="${replicas:+, }$name ($current)"
	done < <(printf '%s\n' "$cluster" | grep -o '{"name":"[^"]*","current":[a-z]*' || true)
	printf 'R%s, leader %s, replicas %s' "${count:-?}" "${leader:-none}" "${replicas:-none}"
}
