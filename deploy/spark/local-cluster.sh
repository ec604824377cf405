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

die() {
  echo "local-cluster: $*" >&2
  exit 1
}

note() { echo "local-cluster: $*" >&2; }

CACHE="${SBERT_SPARK_HOME:-$HOME/.cache/sbert-pipeline/spark}"
STATE_DIR="$CACHE/run"
STATE="$STATE_DIR/processes"
RUNNER_ARTIFACT="org.apache.beam:beam-runners-spark-3"
DEPENDENCY_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
JOB_SERVER_MAIN="org.apache.beam.runners.spark.SparkJobServerDriver"
# Spark 3.2 predates Java 17: its JVMs need these packages opened (ignored by older Javas).
OPENS="java.base/java.lang java.base/java.lang.invoke java.base/java.lang.reflect java.base/java.io
java.base/java.net java.base/java.nio java.base/java.util java.base/java.util.concurrent
java.base/java.util.concurrent.atomic java.base/sun.nio.ch java.base/sun.nio.cs
java.base/sun.security.action java.base/sun.util.calendar"

java_open_flags() {
  local package
  printf '%s\n' "-XX:+IgnoreUnrecognizedVMOptions"
  for package in $OPENS; do printf '%s\n' "--add-opens=$package=ALL-UNNAMED"; done
}

# ---------------------------------------------------------------- versions and fetching

python3_or_die() {
  command -v python3 >/dev/null || die "no python3 on PATH: activate the environment that has sbert-pipeline installed"
}

# The newest Beam whose Spark runner Maven Central serves with all its dependencies (checked on
# 2026-12-06: 2.63.0 to 2.77.0 are not served, or lack beam-runners-java-job-service). Pinning
# apache-beam itself that low would hold numpy, pyarrow, protobuf and Dask years back (its
# cloudpickle~=2.2 excludes today's Dask), so a newer SDK runs with this runner, said once by `up`.
SERVED_RUNNER_VERSION="2.62.0"

# True when version $1 is older than or equal to version $2 (X.Y.Z).
version_le() { [[ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1)" == "$1" ]]; }

beam_version() {
  local installed
  python3_or_die
  installed="$(python3 -c 'import importlib.metadata as m; print(m.version("apache-beam"))' 2>/dev/null)" ||
    die "the python3 on PATH ($(command -v python3)) has no apache-beam: activate the environment that has sbert-pipeline installed"
  if [[ -n "${SBERT_SPARK_BEAM_VERSION:-}" ]]; then
    [[ "$SBERT_SPARK_BEAM_VERSION" == "$installed" ]] ||
      note "Beam's Java Spark runner $SBERT_SPARK_BEAM_VERSION (SBERT_SPARK_BEAM_VERSION) with apache-beam $installed: the versions differ"
    echo "$SBERT_SPARK_BEAM_VERSION"
  elif version_le "$installed" "$SERVED_RUNNER_VERSION"; then
    echo "$installed"
  else
    note "Beam's Java Spark runner $SERVED_RUNNER_VERSION with apache-beam $installed: the versions differ (Maven Central serves no Spark runner after $SERVED_RUNNER_VERSION; see deploy/spark/README.md)"
    echo "$SERVED_RUNNER_VERSION"
  fi
}

mvn_quiet() {
  command -v mvn >/dev/null || die "no mvn on PATH: install Maven (apt-get install maven) to fetch the Spark jars"
  mvn -B -q -Dstyle.color=never "$@"
}

# The Spark version the runner was built against, read from the runner's own pom.
spark_version_of_runner() {
  local beam="$1" work="$2"
  # -U: ask again even when an earlier attempt found nothing (Maven caches misses).
  mvn_quiet -U "$DEPENDENCY_PLUGIN:copy" -Dartifact="$RUNNER_ARTIFACT:$beam:pom" \
    -DoutputDirectory="$work" >"$work/mvn-pom.log" 2>&1 ||
    die "Maven Central does not serve Beam's Spark runner $beam; set SBERT_SPARK_BEAM_VERSION to a version it serves (see deploy/spark/README.md)"
  python3 - "$work/beam-runners-spark-3-$beam.pom" <<'PY'
import sys
import xml.etree.ElementTree as ET

ns = {"m": "http://maven.apache.org/POM/4.0.0"}
for dep in ET.parse(sys.argv[1]).getroot().iterfind(".//m:dependency", ns):
    if dep.findtext("m:artifactId", namespaces=ns) == "spark-core_2.12":
        print(dep.findtext("m:version", namespaces=ns))
        break
else:
    sys.exit("the runner's pom names no spark-core_2.12")
PY
}

write_runtime_pom() {
  local beam="$1" spark="$2" artifact
  echo '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
  echo '<groupId>local.sbert</groupId><artifactId>spark-runtime</artifactId><version>1</version>'
  echo '<packaging>pom</packaging><dependencies>'
  printf '<dependency><groupId>org.apache.beam</groupId><artifactId>beam-runners-spark-3</artifactId><version>%s</version></dependency>\n' "$beam"
  # What the runner declares as provided by the cluster: the standalone Master/Worker are in spark-core.
  for artifact in spark-core_2.12 spark-streaming_2.12 spark-sql_2.12; do
    printf '<dependency><groupId>org.apache.spark</groupId><artifactId>%s</artifactId><version>%s</version></dependency>\n' "$artifact" "$spark"
  done
  echo '</dependencies></project>'
}

# An executable jar with no classes of its own: its manifest puts jars/* on the class path and
# opens the packages Spark needs, so `java -jar` (and Beam's --spark_job_server_jar) runs the job server.
write_job_server_jar() {
  local home="$1" jar="$2"
  python3 - "$home" "$jar" "$JOB_SERVER_MAIN" "$OPENS" <<'PY'
import pathlib
import sys
import zipfile

home, jar, main, opens = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
class_path = " ".join(f"jars/{p.name}" for p in sorted((home / "jars").glob("*.jar")))
attributes = {
    "Manifest-Version": "1.0",
    "Main-Class": main,
    "Class-Path": class_path,
    "Add-Opens": " ".join(opens.split()),
}


def wrapped(line: str) -> str:
    # Manifest lines hold at most 72 bytes; longer values continue on lines starting with a space.
    parts = [line[:72]] + [" " + line[i : i + 71] for i in range(72, len(line), 71)]
    return "\r\n".join(parts) + "\r\n"


manifest = "".join(wrapped(f"{key}: {value}") for key, value in attributes.items()) + "\r\n"
with zipfile.ZipFile(jar, "w") as archive:
    archive.writestr("META-INF/MANIFEST.MF", manifest)
PY
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
    write_runtime_pom "$beam" "$spark" >"$work/pom.xml"
    (cd "$work" && mvn_quiet "$DEPENDENCY_PLUGIN:copy-dependencies" -DoutputDirectory="$work/jars" \
      >"$work/mvn-jars.log" 2>&1) ||
      { grep -m1 "ERROR" "$work/mvn-jars.log" | sed "s/\x1b\[[0-9;]*m//g" | cut -c1-400 >&2; die "Maven could not fetch Spark $spark with Beam's Spark runner $beam"; }
    rm -rf "$home"
    mkdir -p "$home/conf"
    mv "$work/jars" "$home/jars"
    # Spark's launcher takes a folder with RELEASE and jars/ as a Spark distribution; conf/java-opts
    # reaches the executors that the workers start.
    echo "Spark $spark (jars from Maven Central) with Beam's Spark runner $beam" >"$home/RELEASE"
    java_open_flags >"$home/conf/java-opts"
    write_job_server_jar "$home" "$home/beam-runners-spark-3-job-server-$beam.jar"
    touch "$home/complete"
  fi
  check_runtime "$home" "$beam"
  echo "$home"
}

check_runtime() {
  local home="$1" beam="$2" spark
  spark="${home##*-spark-}"
  command -v java >/dev/null || die "no java on PATH: install a Java runtime (Java 17 works) to run Spark"
  java -version >/dev/null 2>&1 || die "java on PATH does not run: $(command -v java)"
  [[ -f "$home/jars/spark-core_2.12-$spark.jar" ]] || die "the cache lacks Spark $spark: remove $home and run again"
  [[ -f "$home/jars/beam-runners-spark-3-$beam.jar" ]] || die "the cache lacks Beam's Spark runner $beam: remove $home and run again"
  [[ -f "$home/beam-runners-spark-3-job-server-$beam.jar" ]] || die "the cache lacks the job server launcher: remove $home and run again"
}

# ---------------------------------------------------------------- processes

now() { date +%s.%N; }

since() { awk -v start="$1" -v end="$(now)" 'BEGIN { printf "%.1f", end - start }'; }

port_in_use() { (: <"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

started_at() { ps -o lstart= -p "$1" 2>/dev/null | awk '{ $1 = $1; print }'; }

# Starts a command in its own process group, logging to $STATE_DIR/NAME.log, and records it.
launch() {
  local name="$1"
  shift
  local pid
  if command -v setsid >/dev/null; then
    setsid "$@" >"$STATE_DIR/$name.log" 2>&1 </dev/null &
  else
    "$@" >"$STATE_DIR/$name.log" 2>&1 </dev/null &
  fi
  pid=$!
  sleep 0.2
  printf '%s\t%s\t%s\n' "$name" "$pid" "$(started_at "$pid")" >>"$STATE"
  echo "$pid"
}

wait_for_port() {
  local name="$1" pid="$2" port="$3" seconds="${4:-90}" waited=0
  until port_in_use "$port"; do
    kill -0 "$pid" 2>/dev/null || die "$name stopped while starting: see $STATE_DIR/$name.log"
    ((waited++ < seconds * 5)) || die "$name did not open port $port in ${seconds}s: see $STATE_DIR/$name.log"
    sleep 0.2
  done
}

# True when PID is still the process recorded (same start time), not a later one with its id.
still_recorded() {
  local pid="$1" started="$2"
  kill -0 "$pid" 2>/dev/null && [[ "$(started_at "$pid")" == "$started" ]]
}

stop_recorded() {
  local name="$1" pid="$2" started="$3" waited=0
  if ! still_recorded "$pid" "$started"; then
    note "$name (pid $pid) is already gone"
    return 0
  fi
  # The group holds what the process started (Spark executors, Python SDK workers).
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  while still_recorded "$pid" "$started" && ((waited++ < 50)); do sleep 0.2; done
  if still_recorded "$pid" "$started"; then
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  note "stopped $name (pid $pid)"
}

# ---------------------------------------------------------------- commands

cmd_up() {
  local workers=1 job_server=false master_port=7077 webui_port=8080 pool_port=50000 job_port=8099
  local arg flag value
  while (($#)); do
    arg="$1"
    shift
    if [[ "$arg" == --job-server ]]; then
      job_server=true
      continue
    fi
    flag="${arg%%=*}"
    case "$flag" in
      --workers | --master-port | --webui-port | --worker-pool-port | --job-port) ;;
      *) die "unknown option for up: $arg (see --help)" ;;
    esac
    if [[ "$arg" == *=* ]]; then
      value="${arg#*=}"
    else
      (($#)) || die "$flag takes a value"
      value="$1"
      shift
    fi
    case "$flag" in
      --workers) workers="$value" ;;
      --master-port) master_port="$value" ;;
      --webui-port) webui_port="$value" ;;
      --worker-pool-port) pool_port="$value" ;;
      --job-port) job_port="$value" ;;
    esac
  done
  [[ "$workers" =~ ^[1-9][0-9]*$ ]] || die "--workers takes a whole number of 1 or more, not '$workers'"
  local port
  for port in "$master_port" "$webui_port" "$pool_port" "$job_port"; do
    [[ "$port" =~ ^[0-9]+$ ]] || die "a port is a number, not '$port'"
  done
  if [[ -s "$STATE" ]]; then
    die "a cluster is already recorded in $STATE: run down first"
  fi
  local needed=("$master_port" "$webui_port" "$pool_port")
  if [[ "$job_server" == true ]]; then needed+=("$job_port" "$((job_port - 1))" "$((job_port - 2))"); fi
  for port in "${needed[@]}"; do
    port_in_use "$port" && die "port $port on 127.0.0.1 is in use: pick another with the options of up"
  done

  local home beam master java_opts=()
  home="$(runtime_home)"
  python3 -c 'import apache_beam, sbert_pipeline' 2>/dev/null ||
    die "$(command -v python3) cannot import apache_beam and sbert_pipeline: activate the environment that has sbert-pipeline installed"
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
  note "logs and state: $STATE_DIR; stop with: deploy/spark/local-cluster.sh down"
  trap - EXIT
  echo "$master"
}

# Beam's worker pool starts each SDK worker as `python`: a wrapper makes that the python3 of
# PATH (the environment with this package), whatever `python` would otherwise be.
start_worker_pool() {
  local port="$1" python pid started
  python="$(command -v python3)"
  mkdir -p "$STATE_DIR/bin"
  printf '#!/bin/sh\nexec %q "$@"\n' "$python" >"$STATE_DIR/bin/python"
  chmod +x "$STATE_DIR/bin/python"
  started="$(now)"
  pid="$(PATH="$STATE_DIR/bin:$PATH" launch worker-pool python3 -m apache_beam.runners.worker.worker_pool_main \
    --service_port="$port")"
  wait_for_port worker-pool "$pid" "$port"
  note "worker pool up in $(since "$started")s on localhost:$port (SDK workers: $python, environment type EXTERNAL)"
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
  if [[ ! -s "$STATE" ]]; then
    note "no local Spark cluster is recorded in $STATE: nothing to stop"
    return 0
  fi
  local name pid started
  # Reverse order: the job server and the SDK workers go before the workers and the master.
  while IFS=$'\t' read -r name pid started; do
    stop_recorded "$name" "$pid" "$started"
  done < <(tac "$STATE")
  rm -f "$STATE" "$STATE_DIR/cluster.env"
  # The logs stay; the applications' copies of the jars go.
  find "$STATE_DIR" -path "$STATE_DIR/work-*" -name "*.jar" -delete
}

cmd_status() {
  (($# == 0)) || die "status takes no options"
  if [[ ! -s "$STATE" ]]; then
    echo "no local Spark cluster is up"
    return 1
  fi
  local name pid started down=0
  while IFS=$'\t' read -r name pid started; do
    if still_recorded "$pid" "$started"; then
      echo "$name: running (pid $pid)"
    else
      echo "$name: gone (pid $pid)"
      down=1
    fi
  done <"$STATE"
  cat "$STATE_DIR/cluster.env"
  return "$down"
}

cmd_fetch() {
  (($# == 0)) || die "fetch takes no options"
  runtime_home
}

main() {
  local command="${1:-}"
  (($#)) && shift
  case "$command" in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    status) cmd_status "$@" ;;
    fetch) cmd_fetch "$@" ;;
    -h | --help | help) usage ;;
    "")
      usage >&2
      exit 2
      ;;
    *)
      echo "local-cluster: unknown command '$command'" >&2
      usage >&2
      exit 2
      ;;
  esac
}

main "$@"
