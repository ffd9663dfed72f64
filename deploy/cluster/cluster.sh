#!/usr/bin/env bash
# A Spark standalone cluster and a Spark Connect server on loopback, from the Spark in .venv
# (the pip package ships bin/spark-class, bin/spark-submit and the Connect server's jar, not
# the sbin/start-*.sh scripts): `make cluster-up`, `make cluster-down`, `make cluster-status`.
#
#   master          spark://127.0.0.1:$SPARK_MASTER_PORT (7077), web UI $SPARK_MASTER_WEBUI_PORT (8080)
#   workers         $CLUSTER_WORKERS (2), each $CLUSTER_WORKER_CORES cores and $CLUSTER_WORKER_MEMORY,
#                   web UIs from $SPARK_WORKER_WEBUI_PORT (8081) up
#   Connect server  sc://127.0.0.1:$SPARK_CONNECT_PORT (15002), with Delta's jars and SQL extension,
#                   its executors on the workers
#
# Everything lives under $CLUSTER_DIR (.cluster, git-ignored): logs/, pids/, workdir/, and the
# properties files submit.conf (for `spark-submit --properties-file`) and connect.conf. Each
# daemon runs in its own process group, so `down` also ends the executors and Python workers it
# started; `down` fails if anything it started is still alive.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

HOST=127.0.0.1
MASTER_PORT=${SPARK_MASTER_PORT:-7077}
MASTER_UI_PORT=${SPARK_MASTER_WEBUI_PORT:-8080}
WORKER_UI_PORT=${SPARK_WORKER_WEBUI_PORT:-8081}
CONNECT_PORT=${SPARK_CONNECT_PORT:-15002}
WORKERS=${CLUSTER_WORKERS:-2}
# Each worker offers room for one executor of each application at a time (the Connect server
# keeps its executors while it runs), so a spark-submit never waits behind the Connect server.
WORKER_CORES=${CLUSTER_WORKER_CORES:-2}
WORKER_MEMORY=${CLUSTER_WORKER_MEMORY:-2g}
EXECUTOR_MEMORY=${CLUSTER_EXECUTOR_MEMORY:-1g}
EXECUTOR_OFF_HEAP=${CLUSTER_EXECUTOR_OFF_HEAP:-512m}  # Comet's pool, beside the executor heap
ACCELERATOR=${CLUSTER_ACCELERATOR:-comet}  # or none: plain Spark on the executors
DIR=${CLUSTER_DIR:-.cluster}
PYTHON=$ROOT/.venv/bin/python
MASTER_URL=spark://$HOST:$MASTER_PORT
START_TIMEOUT=${CLUSTER_START_TIMEOUT:-300}  # the Connect server's first start resolves jars

export SPARK_HOME=$ROOT/.venv/lib/python3.11/site-packages/pyspark
export SPARK_LOCAL_IP=$HOST           # RPC and web UIs bind to loopback only
export SPARK_DAEMON_MEMORY=${SPARK_DAEMON_MEMORY:-512m}
export SPARK_CONF_DIR=$ROOT/$DIR/conf # no spark-env.sh or spark-defaults.conf from elsewhere
export TZ=UTC

die() { echo "cluster: $*" >&2; exit 1; }

port_busy() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# Start "$@" detached, in its own session (process group = its pid), output to logs/$name.log.
start() {
  local name=$1; shift
  setsid "$@" >"$DIR/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$DIR/pids/$name.pid"
}

alive() { [[ -f $DIR/pids/$1.pid ]] && kill -0 "$(cat "$DIR/pids/$1.pid")" 2>/dev/null; }

# Wait until `check` succeeds; fail with the daemon's log tail if it died or time ran out.
wait_for() {
  local name=$1 what=$2 check=$3 deadline=$((SECONDS + START_TIMEOUT))
  until eval "$check"; do
    if ! alive "$name"; then
      tail -n 25 "$DIR/logs/$name.log" >&2
      die "$name exited before $what (log: $DIR/logs/$name.log)"
    fi
    ((SECONDS < deadline)) || die "$name: no $what after ${START_TIMEOUT}s (log: $DIR/logs/$name.log)"
    sleep 1
  done
}

alive_workers() {
  "$PYTHON" - "$MASTER_UI_PORT" <<'EOF' 2>/dev/null
import json, sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/json/", timeout=2) as r:
    print(json.load(r)["aliveworkers"])
EOF
}

write_properties() {
  # Delta's and Comet's settings come from logmetrics.session (the one place their pins live).
  local common
  common=$(cat <<EOF
spark.master $MASTER_URL
spark.driver.host $HOST
spark.driver.bindAddress $HOST
spark.driver.memory 1g
spark.executor.memory $EXECUTOR_MEMORY
spark.executor.cores 1
spark.cores.max $WORKERS
spark.pyspark.python $PYTHON
spark.executorEnv.TZ UTC
spark.sql.session.timeZone UTC
spark.ui.enabled false
spark.ui.showConsoleProgress false
spark.sql.shuffle.partitions $((WORKERS * 4))
spark.databricks.delta.snapshotPartitions 2
spark.memory.offHeap.size $EXECUTOR_OFF_HEAP
EOF
)
  { echo "# Written by deploy/cluster/cluster.sh: spark-submit --properties-file $DIR/submit.conf"
    echo "$common"
    "$PYTHON" -m logmetrics.session --accelerator "$ACCELERATOR"
  } >"$DIR/submit.conf"
  { echo "# Written by deploy/cluster/cluster.sh: the Spark Connect server's settings"
    echo "$common"
    echo "spark.app.name Spark Connect server"
    echo "spark.connect.grpc.binding.address $HOST"
    echo "spark.connect.grpc.binding.port $CONNECT_PORT"
    "$PYTHON" -m logmetrics.session --accelerator "$ACCELERATOR"
  } >"$DIR/connect.conf"
}

up() {
  [[ -x $PYTHON ]] || die ".venv is missing: run make install"
  local running
  running=$(ls "$DIR"/pids/*.pid 2>/dev/null || true)
  [[ -z $running ]] || die "already up (or not cleanly down): run make cluster-down first"
  local port
  for port in "$MASTER_PORT" "$MASTER_UI_PORT" "$CONNECT_PORT" \
    $(seq "$WORKER_UI_PORT" $((WORKER_UI_PORT + WORKERS - 1))); do
    ! port_busy "$port" || die "port $port on $HOST is in use (override with the env vars in $0)"
  done
  mkdir -p "$DIR"/{logs,pids,work,conf}
  # A start that fails half-way stops what it had started.
  trap 'echo "cluster: stopping what had started" >&2; down' EXIT
  write_properties

  start master "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
    --host "$HOST" --port "$MASTER_PORT" --webui-port "$MASTER_UI_PORT"
  wait_for master "web UI on $MASTER_UI_PORT" "port_busy $MASTER_UI_PORT && port_busy $MASTER_PORT"
  echo "master   $MASTER_URL  (web UI http://$HOST:$MASTER_UI_PORT)"

  local i
  for i in $(seq 1 "$WORKERS"); do
    start "worker-$i" "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
      --host "$HOST" --webui-port $((WORKER_UI_PORT + i - 1)) \
      --cores "$WORKER_CORES" --memory "$WORKER_MEMORY" --work-dir "$DIR/workdir/worker-$i" \
      "$MASTER_URL"
  done
  wait_for "worker-$WORKERS" "registration with the master" \
    "[[ \$(alive_workers) == $WORKERS ]]"
  echo "workers  $WORKERS x ($WORKER_CORES cores, $WORKER_MEMORY)"

  start connect "$SPARK_HOME/bin/spark-submit" \
    --class org.apache.spark.sql.connect.service.SparkConnectServer \
    --properties-file "$DIR/connect.conf"
  wait_for connect "Connect endpoint on $CONNECT_PORT" "port_busy $CONNECT_PORT"
  echo "connect  sc://$HOST:$CONNECT_PORT  (Delta via SQL and the DataFrame API)"
  echo "logs     $DIR/logs/; spark-submit --properties-file $DIR/submit.conf ..."
  trap - EXIT
}

down() {
  local pidfile name pid left=()
  # Connect server first (its executors are on the workers), then the workers, then the master.
  for name in connect $(cd "$DIR/pids" 2>/dev/null && ls worker-*.pid 2>/dev/null | sed 's/.pid$//') master; do
    pidfile=$DIR/pids/$name.pid
    [[ -f $pidfile ]] || continue
    pid=$(cat "$pidfile")
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do
      pgrep -g "$pid" >/dev/null || break
      sleep 0.5
    done
    if pgrep -g "$pid" >/dev/null; then
      kill -KILL -- "-$pid" 2>/dev/null || true
      sleep 1
    fi
    if pgrep -g "$pid" >/dev/null; then
      left+=("$name")
    else
      rm -f "$pidfile"
      echo "stopped  $name"
    fi
  done
  ((${#left[@]} == 0)) || die "still running: ${left[*]} (pids in $DIR/pids)"
}

status() {
  local pidfile name
  for pidfile in "$DIR"/pids/*.pid; do
    [[ -f $pidfile ]] || { echo "down"; return; }
    name=$(basename "$pidfile" .pid)
    if alive "$name"; then echo "up       $name (pid $(cat "$pidfile"))"; else echo "dead     $name"; fi
  done
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  *) die "usage: $0 up|down|status" ;;
esac
