#!/usr/bin/env bash
# A Flink session cluster on 127.0.0.1 for Beam's portable Flink runner, with no Docker and no
# Flink distribution: a JobManager, N TaskManagers (1 slot each) and Beam's Python SDK worker
# pool (environment type EXTERNAL), and, on request, Beam's Flink job server. Everything Java
# comes from Maven Central through `mvn`, once, and is kept under $SBERT_FLINK_HOME (default
# ~/.cache/sbert-pipeline/flink).
set -euo pipefail
shopt -s inherit_errexit # command substitutions stop at the first error too

usage() {
  cat <<'USAGE'
usage: deploy/flink/local-cluster.sh COMMAND [options]

commands:
  up [--workers N] [--job-server]   fetch what is missing, start the cluster, print its master last
  down                              stop exactly the processes that `up` started
  status                            show the recorded processes and whether they still run
  fetch                             only fetch and check the jars (no process is started)

options of `up`:
  --workers N           TaskManagers, 1 slot each (default 1)
  --job-server          also start Beam's Flink job server (for --runner PortableRunner)
  --rest-port P         JobManager REST port, the master's address (default 8081)
  --rpc-port P          JobManager RPC port (default 6123)
  --worker-pool-port P  port of Beam's Python SDK worker pool (default 50100)
  --job-port P          job server port (default 8199; artifacts on P-1, expansion on P-2)

environment:
  SBERT_FLINK_HOME          cache and state folder (default ~/.cache/sbert-pipeline/flink)
  SBERT_FLINK_BEAM_VERSION  Beam's Java runner version; default: the installed apache-beam's, or
                            the newest Maven Central serves (2.62.0) when that is older
  SBERT_FLINK_VERSION       the Flink line of Beam's runner (default 1.19); the exact Flink
                            version is the one that runner declares
  SBERT_FLINK_TASKMANAGER_MEMORY  memory of each TaskManager process (default 1536m)
The Python SDK workers run the `python3` found first on PATH: activate the environment that
has this package installed before `up`.
USAGE
}

CLUSTER="Flink"
SCRIPT="deploy/flink/local-cluster.sh"
# shellcheck source=../lib/local-cluster-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/local-cluster-common.sh"

CACHE="${SBERT_FLINK_HOME:-$HOME/.cache/sbert-pipeline/flink}"
STATE_DIR="$CACHE/run"
STATE="$STATE_DIR/processes"
FLINK_LINE="${SBERT_FLINK_VERSION:-1.19}"
RUNNER="beam-runners-flink-$FLINK_LINE"
JOB_SERVER_MAIN="org.apache.beam.runners.flink.FlinkJobServerDriver"
LAUNCHER_SOURCE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/JobServerLauncher.java"
# What Flink's own distribution opens on Java 17 (its env.java.opts.all), and java.lang.invoke
# for Beam's coders; ignored by older Javas.
OPENS="java.base/java.lang java.base/java.lang.invoke java.base/java.lang.reflect java.base/java.io
java.base/java.net java.base/java.nio java.base/java.text java.base/java.time java.base/java.util
java.base/java.util.concurrent java.base/java.util.concurrent.atomic
java.base/java.util.concurrent.locks java.base/sun.nio.ch"
# Flink 1.19 logs through Log4j 2.17.1; the runner brings only slf4j's API.
LOG4J_VERSION="2.17.1"

# ---------------------------------------------------------------- versions and fetching

# The newest Beam whose Flink runner Maven Central serves with all its dependencies (checked on
# 2026-12-06: 2.63.0 and 2.77.0 are not served; 2.70.0 is, but, as for Spark, not its
# beam-runners-java-job-service). See deploy/spark/README.md for why apache-beam stays newer.
SERVED_RUNNER_VERSION="2.62.0"

beam_version() { runner_beam_version "${SBERT_FLINK_BEAM_VERSION:-}" "$SERVED_RUNNER_VERSION" SBERT_FLINK_BEAM_VERSION; }

# The Flink version the runner was built against, read from the runner's own pom.
flink_version_of_runner() {
  local beam="$1" work="$2"
  fetch_pom "org.apache.beam:$RUNNER:$beam:pom" "$work" ||
    die "Maven Central does not serve Beam's Flink $FLINK_LINE runner $beam; set SBERT_FLINK_BEAM_VERSION (or SBERT_FLINK_VERSION) to one it serves (see deploy/flink/README.md)"
  declared_version "$work/$RUNNER-$beam.pom" flink-runtime
}

# Fetches (once) and checks the runtime; prints its folder.
runtime_home() {
  local beam flink home work
  beam="$(beam_version)"
  mkdir -p "$CACHE"
  home="$(find "$CACHE" -maxdepth 1 -type d -name "beam-$beam-flink-$FLINK_LINE.*" | sort | tail -n 1)"
  if [[ -z "$home" || ! -f "$home/complete" ]]; then
    work="$(mktemp -d "$CACHE/fetch.XXXXXX")"
    # shellcheck disable=SC2064  # $work is fixed now; this runs in a subshell of its own
    trap "rm -rf '$work'" EXIT
    note "fetching Beam's Flink $FLINK_LINE runner $beam and its Flink from Maven Central (once; about 155 MB)"
    flink="$(flink_version_of_runner "$beam" "$work")"
    home="$CACHE/beam-$beam-flink-$flink"
    # The runner brings Flink's JobManager and TaskManager (flink-runtime, flink-clients,
    # flink-rpc-akka-loader) as compile dependencies; a Log4j binding makes them log.
    write_runtime_pom flink-runtime "org.apache.beam:$RUNNER:$beam" \
      "org.apache.logging.log4j:log4j-slf4j-impl:$LOG4J_VERSION" \
      "org.apache.logging.log4j:log4j-core:$LOG4J_VERSION" >"$work/pom.xml"
    fetch_jars "$work" "Maven could not fetch Flink $flink with Beam's Flink runner $beam"
    rm -rf "$home"
    mkdir -p "$home"
    mv "$work/jars" "$home/jars"
    touch "$home/complete"
  fi
  build_job_server_jar "$home" "$home/$RUNNER-job-server-$beam.jar"
  check_runtime "$home" "$beam"
  echo "$home"
}

# The job server jar: JobServerLauncher.java compiled, whose jobs stage only that jar (see the
# file); without javac, a jar whose manifest puts jars/* on the class path, whose jobs stage all
# of them: the same results, 13-15 s more per Beam stage on a busy 2-core machine.
build_job_server_jar() {
  local home="$1" jar="$2" classes
  if [[ -f "$jar" && "$jar" -nt "$LAUNCHER_SOURCE" ]]; then return 0; fi
  if ! command -v javac >/dev/null; then
    note "no javac on PATH: each Flink job stages all the jars (slower); install a JDK and remove $jar to avoid it"
    write_launcher_jar "$home" "$jar" "$JOB_SERVER_MAIN"
    return 0
  fi
  classes="$(mktemp -d "$CACHE/launcher.XXXXXX")"
  javac --release 11 -d "$classes" "$LAUNCHER_SOURCE" >"$classes.log" 2>&1 ||
    {
      cat "$classes.log" >&2
      rm -rf "$classes" "$classes.log"
      die "javac could not compile $LAUNCHER_SOURCE"
    }
  write_launcher_jar "$home" "$jar" JobServerLauncher "$classes"
  rm -rf "$classes" "$classes.log"
}

check_runtime() {
  local home="$1" beam="$2" flink
  flink="${home##*-flink-}"
  check_java
  [[ -f "$home/jars/flink-runtime-$flink.jar" ]] || die "the cache lacks Flink $flink: remove $home and run again"
  [[ -f "$home/jars/$RUNNER-$beam.jar" ]] || die "the cache lacks Beam's Flink runner $beam: remove $home and run again"
  [[ -f "$home/$RUNNER-job-server-$beam.jar" ]] || die "the cache lacks the job server launcher: remove $home and run again"
}

# ---------------------------------------------------------------- configuration

# Flink's configuration for this cluster (config.yaml): everything on 127.0.0.1, one slot per
# TaskManager, small memory, temporary files (the blob stores and caches) under run/tmp.
# Network memory is fixed at 256 MB: a Beam stage runs as one Flink batch job whose tasks all
# hold network buffers at once (the embed stage asks 512 more than Flink's 10% of 1 GB leaves).
# Classes parent-first: Beam's runner, on the TaskManagers' class path, then keeps a job's SDK
# workers from one Flink task to the next for --environment_cache_millis; loaded from the job's
# own copy of the jars (Flink's default, child-first), it closes them after each task, and every
# batch phase of a stage starts new SDK workers that load the model again.
write_config() {
  local conf="$1" rest_port="$2" rpc_port="$3" workers="$4"
  cat >"$conf/config.yaml" <<YAML
jobmanager.rpc.address: 127.0.0.1
jobmanager.rpc.port: $rpc_port
jobmanager.bind-host: 127.0.0.1
jobmanager.memory.process.size: 768m
rest.address: 127.0.0.1
rest.bind-address: 127.0.0.1
rest.port: $rest_port
taskmanager.host: 127.0.0.1
taskmanager.bind-host: 127.0.0.1
taskmanager.numberOfTaskSlots: 1
taskmanager.memory.process.size: ${SBERT_FLINK_TASKMANAGER_MEMORY:-1536m}
taskmanager.memory.managed.fraction: 0.15
taskmanager.memory.network.min: 256m
taskmanager.memory.network.max: 256m
parallelism.default: $workers
io.tmp.dirs: '$STATE_DIR/tmp/jobmanager'
web.tmpdir: '$STATE_DIR/tmp/jobmanager'
blob.service.cleanup.interval: 300
classloader.resolve-order: parent-first
YAML
  cat >"$conf/log4j.properties" <<'LOG4J'
rootLogger.level = INFO
rootLogger.appenderRef.console.ref = ConsoleAppender
appender.console.name = ConsoleAppender
appender.console.type = CONSOLE
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %-5p %-60c %x - %m%n
LOG4J
}

# What Flink's start scripts compute from the configuration: the JVM's memory flags (first
# line) and the memory settings the process must be given (second line).
memory_params() {
  local home="$1" conf="$2" which="$3"
  java -Dlog4j2.level=WARN -cp "$home/jars/*" org.apache.flink.runtime.util.bash.BashJavaUtils \
    "$which" --configDir "$conf" 2>&1 | sed -n 's/^BASH_JAVA_UTILS_EXEC_RESULT://p'
}

# ---------------------------------------------------------------- commands

cmd_up() {
  local -A UP=([--workers]=1 [--job-server]=false [--rest-port]=8081 [--rpc-port]=6123
    [--worker-pool-port]=50100 [--job-port]=8199)
  SWITCHES="--job-server" parse_up_options "$@"
  local workers="${UP[--workers]}" job_server="${UP[--job-server]}" rest_port="${UP[--rest-port]}"
  local rpc_port="${UP[--rpc-port]}" pool_port="${UP[--worker-pool-port]}" job_port="${UP[--job-port]}"
  check_workers "$workers"
  check_ports "$rest_port" "$rpc_port" "$pool_port" "$job_port"
  refuse_when_recorded
  local needed=("$rest_port" "$rpc_port" "$pool_port")
  if [[ "$job_server" == true ]]; then needed+=("$job_port" "$((job_port - 1))" "$((job_port - 2))"); fi
  check_ports --free "${needed[@]}"

  local home beam master conf jar java_opts=() jm_params=() tm_params=()
  home="$(runtime_home)"
  check_sdk_python
  beam="${home#"$CACHE"/beam-}"
  beam="${beam%%-flink-*}"
  jar="$home/$RUNNER-job-server-$beam.jar"
  mapfile -t java_opts < <(java_open_flags)
  master="127.0.0.1:$rest_port"
  conf="$STATE_DIR/conf"
  mkdir -p "$STATE_DIR"
  : >"$STATE"
  # From here on, a failure stops what this `up` started (the logs stay).
  trap 'note "up did not finish: stopping what it started"; cmd_down' EXIT
  {
    echo "FLINK_MASTER=$master"
    echo "FLINK_VERSION=$FLINK_LINE"
    echo "FLINK_PARALLELISM=$workers"
    echo "BEAM_WORKER_POOL=localhost:$pool_port"
    echo "FLINK_JOB_SERVER_JAR=$jar"
    if [[ "$job_server" == true ]]; then echo "BEAM_JOB_ENDPOINT=localhost:$job_port"; fi
  } >"$STATE_DIR/cluster.env"
  rm -rf "$conf" "$STATE_DIR/tmp" # what an earlier cluster left
  mkdir -p "$conf" "$STATE_DIR/tmp/jobmanager"
  write_config "$conf" "$rest_port" "$rpc_port" "$workers"
  mapfile -t jm_params < <(memory_params "$home" "$conf" GET_JM_RESOURCE_PARAMS)
  mapfile -t tm_params < <(memory_params "$home" "$conf" GET_TM_RESOURCE_PARAMS)
  ((${#jm_params[@]} == 2 && ${#tm_params[@]} == 2)) ||
    die "Flink could not size its processes from $conf/config.yaml (check SBERT_FLINK_TASKMANAGER_MEMORY)"

  local pid i started workers_started
  local log4j="-Dlog4j.configurationFile=file:$conf/log4j.properties"
  started="$(now)"
  # shellcheck disable=SC2086  # the memory flags and settings are words, as Flink's scripts pass them
  pid="$(launch jobmanager java ${jm_params[0]} "${java_opts[@]}" "$log4j" -cp "$home/jars/*" \
    org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint --configDir "$conf" \
    ${jm_params[1]})"
  wait_for_port jobmanager "$pid" "$rest_port"
  note "JobManager up in $(since "$started")s"
  workers_started="$(now)"
  for ((i = 1; i <= workers; i++)); do
    mkdir -p "$STATE_DIR/tmp/taskmanager-$i"
    # shellcheck disable=SC2086
    pid="$(launch "taskmanager-$i" java ${tm_params[0]} "${java_opts[@]}" "$log4j" -cp "$home/jars/*" \
      org.apache.flink.runtime.taskexecutor.TaskManagerRunner --configDir "$conf" ${tm_params[1]} \
      -D "taskmanager.resource-id=taskmanager-$i" -D "io.tmp.dirs=$STATE_DIR/tmp/taskmanager-$i")"
  done
  start_worker_pool "$pool_port"
  if [[ "$job_server" == true ]]; then
    started="$(now)"
    pid="$(launch job-server java "$log4j" -jar "$jar" --flink-master "$master" --job-port "$job_port" \
      --artifact-port "$((job_port - 1))" --expansion-port "$((job_port - 2))")"
    wait_for_port job-server "$pid" "$job_port"
    note "job server up in $(since "$started")s on localhost:$job_port"
  fi
  wait_for_taskmanagers "$workers" "$rest_port"
  note "$workers TaskManager(s) registered $(since "$workers_started")s after they started"
  note "logs and state: $STATE_DIR; stop with: $SCRIPT down"
  trap - EXIT
  echo "$master"
}

# The JobManager's REST overview counts the TaskManagers that registered.
wait_for_taskmanagers() {
  local wanted="$1" rest_port="$2" waited=0 alive
  while :; do
    alive="$(python3 - "$rest_port" <<'PY' 2>/dev/null || echo 0
import json
import sys
import urllib.request

with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/overview", timeout=2) as page:
    print(json.load(page).get("taskmanagers", 0))
PY
)"
    ((alive >= wanted)) && return 0
    ((waited++ < 90)) || die "only $alive of $wanted Flink TaskManagers registered in 90s: see $STATE_DIR/taskmanager-*.log"
    sleep 1
  done
}

cmd_down() {
  (($# == 0)) || die "down takes no options"
  # The job server and the SDK workers are asked first, the TaskManagers and the JobManager last.
  stop_all_recorded || return 0
  # The logs stay; the jobs' copies of the jars go.
  rm -rf "$STATE_DIR/tmp"
}

cmd_fetch() {
  (($# == 0)) || die "fetch takes no options"
  runtime_home
}

dispatch "$@"
