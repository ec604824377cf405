#!/usr/bin/env bash
# A Spark standalone cluster on 127.0.0.1 for Beam's portable Spark runner, with no Docker:
# a master, N workers (1 core each), Beam's Python SDK worker pool (environment type EXTERNAL)
# and, on request, Beam's Spark job server. Everything Java comes from Maven Central through
# `mvn`, once, and is kept under $SBERT_SPARK_HOME (default ~/.cache/sbert-pipeline/spark).
set -euo pipefail
shopt -s inherit_errexit # command substitutions stop at the first error too

usage() {
  cat <<'USAGE'
usage: deploy/spark/local-cluster.sh COMMAND [options]

commands:
  up [--workers N] [--job-server]   fetch what is missing, start the cluster, print its master URL last
  down                              stop exactly the processes that `up` started
  status                            show the recorded processes and whether they still run
  fetch                             only fetch and check the jars (no process is started)

options of `up`:
  --workers N           Spark workers, 1 core each (default 1)
  --job-server          also start Beam's Spark job server (for --runner PortableRunner)
  --master-port P       Spark master port (default 7077); its web UI takes --webui-port (8080)
  --worker-pool-port P  port of Beam's Python SDK worker pool (default 50000)
  --job-port P          job server port (default 8099; artifacts on P-1, expansion on P-2)

environment:
  SBERT_SPARK_HOME          cache and state folder (default ~/.cache/sbert-pipeline/spark)
  SBERT_SPARK_BEAM_VERSION  Beam's Java runner version; default: the installed apache-beam's, or
                            the newest Maven Central serves (2.62.0) when that is older
  SBERT_SPARK_WORKER_MEMORY memory each worker offers its executor (default 1g)
The Python SDK workers run the `python3` found first on PATH: activate the environment that
has this package installed before `up`.
USAGE
}

CLUSTER="Spark"
SCRIPT="deploy/spark/local-cluster.sh"
# shellcheck source=../lib/local-cluster-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/local-cluster-common.sh"

CACHE="${SBERT_SPARK_HOME:-$HOME/.cache/sbert-pipeline/spark}"
STATE_DIR="$CACHE/run"
STATE="$STATE_DIR/processes"
RUNNER_ARTIFACT="org.apache.beam:beam-runners-spark-3"
JOB_SERVER_MAIN="org.apache.beam.runners.spark.SparkJobServerDriver"
# Spark 3.2 predates Java 17: its JVMs need these packages opened (ignored by older Javas).
OPENS="java.base/java.lang java.base/java.lang.invoke java.base/java.lang.reflect java.base/java.io
java.base/java.net java.base/java.nio java.base/java.util java.base/java.util.concurrent
java.base/java.util.concurrent.atomic java.base/sun.nio.ch java.base/sun.nio.cs
java.base/sun.security.action java.base/sun.util.calendar"

# ---------------------------------------------------------------- versions and fetching

# The newest Beam whose Spark runner Maven Central serves with all its dependencies (checked on
# 2026-12-06: 2.63.0 to 2.77.0 are not served, or lack beam-runners-java-job-service). Pinning
# apache-beam itself that low would hold numpy, pyarrow, protobuf and Dask years back (its
# cloudpickle~=2.2 excludes today's Dask), so a newer SDK runs with this runner, said once by `up`.
SERVED_RUNNER_VERSION="2.62.0"

beam_version() { runner_beam_version "${SBERT_SPARK_BEAM_VERSION:-}" "$SERVED_RUNNER_VERSION" SBERT_SPARK_BEAM_VERSION; }

# The Spark version the runner was built against, read from the runner's own pom.
spark_version_of_runner() {
  local beam="$1" work="$2"
  fetch_pom "$RUNNER_ARTIFACT:$beam:pom" "$work" ||
    die "Maven Central does not serve Beam's Spark runner $beam; set SBERT_SPARK_BEAM_VERSION to a version it serves (see deploy/spark/README.md)"
  declared_version "$work/beam-runners-spark-3-$beam.pom" spark-core_2.12
}

# Fetches (once) and checks the runtime; prints its folder.
runtime_home() {
  local beam spark home work
  beam="$(beam_version)"
  mkdir -p "$CACHE"
  home="$(find "$CACHE" -maxdepth 1 -type d -name "beam-$beam-spark-*" | sort | tail -n 1)"
  if [[ -z "$home" || ! -f "$home/complete" ]]; then
    work="$(mktemp -d "$CACHE/fetch.XXXXXX")"
    # shellcheck disable=SC2064  # $work is fixed now; this runs in a subshell of its own
    trap "rm -rf '$work'" EXIT
    note "fetching Beam's Spark runner $beam and its Spark from Maven Central (once; about 270 MB)"
    spark="$(spark_version_of_runner "$beam" "$work")"
    home="$CACHE/beam-$beam-spark-$spark"
    # The runner, and what it declares as provided by the cluster: the standalone Master and
    # Worker are in spark-core.
    write_runtime_pom spark-runtime "$RUNNER_ARTIFACT:$beam" "org.apache.spark:spark-core_2.12:$spark" \
      "org.apache.spark:spark-streaming_2.12:$spark" "org.apache.spark:spark-sql_2.12:$spark" >"$work/pom.xml"
    fetch_jars "$work" "Maven could not fetch Spark $spark with Beam's Spark runner $beam"
    rm -rf "$home"
    mkdir -p "$home/conf"
    mv "$work/jars" "$home/jars"
    # Spark's launcher takes a folder with RELEASE and jars/ as a Spark distribution; conf/java-opts
    # reaches the executors that the workers start.
    echo "Spark $spark (jars from Maven Central) with Beam's Spark runner $beam" >"$home/RELEASE"
    java_open_flags >"$home/conf/java-opts"
    write_launcher_jar "$home" "$home/beam-runners-spark-3-job-server-$beam.jar" "$JOB_SERVER_MAIN"
    touch "$home/complete"
  fi
  check_runtime "$home" "$beam"
  echo "$home"
}

check_runtime() {
  local home="$1" beam="$2" spark
  spark="${home##*-spark-}"
  check_java
  [[ -f "$home/jars/spark-core_2.12-$spark.jar" ]] || die "the cache lacks Spark $spark: remove $home and run again"
  [[ -f "$home/jars/beam-runners-spark-3-$beam.jar" ]] || die "the cache lacks Beam's Spark runner $beam: remove $home and run again"
  [[ -f "$home/beam-runners-spark-3-job-server-$beam.jar" ]] || die "the cache lacks the job server launcher: remove $home and run again"
}

# ---------------------------------------------------------------- commands

cmd_up() {
  local -A UP=([--workers]=1 [--job-server]=false [--master-port]=7077 [--webui-port]=8080
    [--worker-pool-port]=50000 [--job-port]=8099)
  SWITCHES="--job-server" parse_up_options "$@"
  local workers="${UP[--workers]}" job_server="${UP[--job-server]}" master_port="${UP[--master-port]}"
  local webui_port="${UP[--webui-port]}" pool_port="${UP[--worker-pool-port]}" job_port="${UP[--job-port]}"
  check_workers "$workers"
  check_ports "$master_port" "$webui_port" "$pool_port" "$job_port"
  refuse_when_recorded
  local needed=("$master_port" "$webui_port" "$pool_port")
  if [[ "$job_server" == true ]]; then needed+=("$job_port" "$((job_port - 1))" "$((job_port - 2))"); fi
  check_ports --free "${needed[@]}"

  local home beam master java_opts=()
  home="$(runtime_home)"
  check_sdk_python
  beam="${home#"$CACHE"/beam-}"
  beam="${beam%%-spark-*}"
  mapfile -t java_opts < <(java_open_flags)
  master="spark://127.0.0.1:$master_port"
  mkdir -p "$STATE_DIR"
  : >"$STATE"
  # From here on, a failure stops what this `up` started (the logs stay).
  trap 'note "up did not finish: stopping what it started"; cmd_down' EXIT
  {
    echo "SPARK_MASTER_URL=$master"
    echo "SPARK_MASTER_WEBUI_URL=http://127.0.0.1:$webui_port"
    echo "BEAM_WORKER_POOL=localhost:$pool_port"
    echo "SPARK_JOB_SERVER_JAR=$home/beam-runners-spark-3-job-server-$beam.jar"
    if [[ "$job_server" == true ]]; then echo "BEAM_JOB_ENDPOINT=localhost:$job_port"; fi
  } >"$STATE_DIR/cluster.env"

  export SPARK_HOME="$home" SPARK_SCALA_VERSION=2.12 SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_HOSTNAME=localhost
  rm -rf "$STATE_DIR"/work-* # what finished applications left (each holds a copy of the jars)
  local pid i started workers_started
  started="$(now)"
  pid="$(launch master java -Xmx256m "${java_opts[@]}" -cp "$home/jars/*" \
    org.apache.spark.deploy.master.Master --host 127.0.0.1 --port "$master_port" --webui-port "$webui_port")"
  wait_for_port master "$pid" "$master_port"
  note "master up in $(since "$started")s"
  workers_started="$(now)"
  for ((i = 1; i <= workers; i++)); do
    mkdir -p "$STATE_DIR/work-$i"
    # The job server stages its whole class path, so each application's folder holds a copy of
    # every jar (about 270 MB): the worker drops the folders of applications ended 5 minutes ago.
    pid="$(launch "worker-$i" java -Xmx256m "${java_opts[@]}" -Dspark.worker.cleanup.enabled=true \
      -Dspark.worker.cleanup.interval=300 -Dspark.worker.cleanup.appDataTtl=300 -cp "$home/jars/*" \
      org.apache.spark.deploy.worker.Worker --host 127.0.0.1 --cores 1 \
      --memory "${SBERT_SPARK_WORKER_MEMORY:-1g}" --webui-port 0 --work-dir "$STATE_DIR/work-$i" "$master")"
  done
  start_worker_pool "$pool_port"
  if [[ "$job_server" == true ]]; then
    started="$(now)"
    pid="$(launch job-server java -jar "$home/beam-runners-spark-3-job-server-$beam.jar" \
      --spark-master-url "$master" --job-port "$job_port" --artifact-port "$((job_port - 1))" \
      --expansion-port "$((job_port - 2))")"
    wait_for_port job-server "$pid" "$job_port"
    note "job server up in $(since "$started")s on localhost:$job_port"
  fi
  wait_for_workers "$workers" "$webui_port"
  note "$workers worker(s) registered $(since "$workers_started")s after they started"
  note "logs and state: $STATE_DIR; stop with: $SCRIPT down"
  trap - EXIT
  echo "$master"
}

# The master's JSON page counts the workers that registered.
wait_for_workers() {
  local wanted="$1" webui_port="$2" waited=0 alive
  while :; do
    alive="$(python3 - "$webui_port" <<'PY' 2>/dev/null || echo 0
import json
import sys
import urllib.request

with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/json/", timeout=2) as page:
    print(sum(w.get("state") == "ALIVE" for w in json.load(page).get("workers", [])))
PY
)"
    ((alive >= wanted)) && return 0
    ((waited++ < 90)) || die "only $alive of $wanted Spark workers registered in 90s: see $STATE_DIR/worker-*.log"
    sleep 1
  done
}

cmd_down() {
  (($# == 0)) || die "down takes no options"
  # The job server and the SDK workers are asked first, the workers and the master last.
  stop_all_recorded || return 0
  # The logs stay; the applications' copies of the jars go.
  find "$STATE_DIR" -path "$STATE_DIR/work-*" -name "*.jar" -delete
}

cmd_fetch() {
  (($# == 0)) || die "fetch takes no options"
  runtime_home
}

dispatch "$@"
