#!/usr/bin/env bash
# What deploy/spark/local-cluster.sh and deploy/flink/local-cluster.sh share: messages, Maven,
# the job server launcher jar, starting and recording processes, stopping exactly those, and
# Beam's Python SDK worker pool. Sourced, never run; the sourcing script sets before use:
#   CLUSTER  the cluster's name in messages (Spark, Flink)
#   SCRIPT   how the user runs the script (deploy/spark/local-cluster.sh)
#   CACHE, STATE_DIR, STATE  its cache folder, its state folder and its process record
#   OPENS    the JDK packages its JVMs need opened (java_open_flags)
# The scripts set these already; set here too so that nothing sourced runs laxer.
set -euo pipefail

die() {
  echo "local-cluster: $*" >&2
  exit 1
}

note() { echo "local-cluster: $*" >&2; }

DEPENDENCY_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.6.1"

java_open_flags() {
  local package
  printf '%s\n' "-XX:+IgnoreUnrecognizedVMOptions"
  for package in $OPENS; do printf '%s\n' "--add-opens=$package=ALL-UNNAMED"; done
}

# ---------------------------------------------------------------- versions and fetching

python3_or_die() {
  command -v python3 >/dev/null || die "no python3 on PATH: activate the environment that has sbert-pipeline installed"
}

# True when version $1 is older than or equal to version $2 (X.Y.Z).
version_le() { [[ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1)" == "$1" ]]; }

# The Beam version of the Java runner: $1 (the user's choice, may be empty), else the installed
# apache-beam's, or $2 (the newest Maven Central serves with all its dependencies) when that is
# older. $3 names the variable that chooses it, in the notes.
runner_beam_version() {
  local chosen="$1" served="$2" variable="$3" installed
  python3_or_die
  installed="$(python3 -c 'import importlib.metadata as m; print(m.version("apache-beam"))' 2>/dev/null)" ||
    die "the python3 on PATH ($(command -v python3)) has no apache-beam: activate the environment that has sbert-pipeline installed"
  if [[ -n "$chosen" ]]; then
    [[ "$chosen" == "$installed" ]] ||
      note "Beam's Java $CLUSTER runner $chosen ($variable) with apache-beam $installed: the versions differ"
    echo "$chosen"
  elif version_le "$installed" "$served"; then
    echo "$installed"
  else
    note "Beam's Java $CLUSTER runner $served with apache-beam $installed: the versions differ (Maven Central serves no $CLUSTER runner after $served; see ${SCRIPT%/*}/README.md)"
    echo "$served"
  fi
}

mvn_quiet() {
  command -v mvn >/dev/null || die "no mvn on PATH: install Maven (apt-get install maven) to fetch the $CLUSTER jars"
  mvn -B -q -Dstyle.color=never "$@"
}

# Copies artifact $1 (group:artifact:version:pom) into folder $2; false when Maven cannot.
fetch_pom() {
  # -U: ask again even when an earlier attempt found nothing (Maven caches misses).
  mvn_quiet -U "$DEPENDENCY_PLUGIN:copy" -Dartifact="$1" -DoutputDirectory="$2" >"$2/mvn-pom.log" 2>&1
}

# A pom named $1 whose dependencies are the GROUP:ARTIFACT:VERSION arguments that follow:
# what fetch_jars fetches, with all their dependencies.
write_runtime_pom() {
  local name="$1" coordinate group artifact version
  shift
  echo '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
  echo "<groupId>local.sbert</groupId><artifactId>$name</artifactId><version>1</version>"
  echo '<packaging>pom</packaging><dependencies>'
  for coordinate in "$@"; do
    IFS=: read -r group artifact version <<<"$coordinate"
    printf '<dependency><groupId>%s</groupId><artifactId>%s</artifactId><version>%s</version></dependency>\n' \
      "$group" "$artifact" "$version"
  done
  echo '</dependencies></project>'
}

# The version pom $1 declares for the dependency whose artifactId is $2.
declared_version() {
  python3 - "$1" "$2" <<'PY'
import sys
import xml.etree.ElementTree as ET

ns = {"m": "http://maven.apache.org/POM/4.0.0"}
for dep in ET.parse(sys.argv[1]).getroot().iterfind(".//m:dependency", ns):
    if dep.findtext("m:artifactId", namespaces=ns) == sys.argv[2]:
        print(dep.findtext("m:version", namespaces=ns))
        break
else:
    sys.exit(f"the runner's pom names no {sys.argv[2]}")
PY
}

# Fetches the dependencies of $WORK/pom.xml into $WORK/jars; dies with Maven's first error and $1.
fetch_jars() {
  local work="$1" failure="$2"
  (cd "$work" && mvn_quiet "$DEPENDENCY_PLUGIN:copy-dependencies" -DoutputDirectory="$work/jars" \
    >"$work/mvn-jars.log" 2>&1) ||
    {
      grep -m1 "ERROR" "$work/mvn-jars.log" | sed "s/\x1b\[[0-9;]*m//g" | cut -c1-400 >&2
      die "$failure"
    }
}

# An executable jar $2 whose main class is $3, which opens $OPENS. With a folder of compiled
# classes $4, the jar holds them; without, it holds no classes: its manifest puts jars/* of
# folder $1 on the class path. Either way `java -jar $2` (and Beam's --spark_job_server_jar or
# --flink_job_server_jar) runs the job server.
write_launcher_jar() {
  local home="$1" jar="$2" main="$3" classes="${4:-}"
  python3 - "$home" "$jar" "$main" "$OPENS" "$classes" <<'PY'
import pathlib
import sys
import zipfile

home, jar, main, opens, classes = sys.argv[1:6]
attributes = {"Manifest-Version": "1.0", "Main-Class": main}
if not classes:
    jars = sorted((pathlib.Path(home) / "jars").glob("*.jar"))
    attributes["Class-Path"] = " ".join(f"jars/{p.name}" for p in jars)
attributes["Add-Opens"] = " ".join(opens.split())


def wrapped(line: str) -> str:
    # Manifest lines hold at most 72 bytes; longer values continue on lines starting with a space.
    parts = [line[:72]] + [" " + line[i : i + 71] for i in range(72, len(line), 71)]
    return "\r\n".join(parts) + "\r\n"


manifest = "".join(wrapped(f"{key}: {value}") for key, value in attributes.items()) + "\r\n"
with zipfile.ZipFile(jar, "w") as archive:
    archive.writestr("META-INF/MANIFEST.MF", manifest)
    if classes:
        for path in sorted(pathlib.Path(classes).rglob("*.class")):
            archive.write(path, path.relative_to(classes).as_posix())
PY
}

check_java() {
  command -v java >/dev/null || die "no java on PATH: install a Java runtime (Java 17 works) to run $CLUSTER"
  java -version >/dev/null 2>&1 || die "java on PATH does not run: $(command -v java)"
}

# Dies unless the python3 on PATH has this package (the SDK workers run it).
check_sdk_python() {
  python3 -c 'import apache_beam, sbert_pipeline' 2>/dev/null ||
    die "$(command -v python3) cannot import apache_beam and sbert_pipeline: activate the environment that has sbert-pipeline installed"
}

# ---------------------------------------------------------------- options and ports

# Parses the options of `up` into the associative array UP, which the caller declares with
# every option as a key: the switches in SWITCHES (space-separated) become true, the others
# take a value (--flag VALUE or --flag=VALUE) in place of their default.
parse_up_options() {
  local arg flag
  while (($#)); do
    arg="$1"
    shift
    if [[ " ${SWITCHES:-} " == *" $arg "* ]]; then
      UP[$arg]=true
      continue
    fi
    flag="${arg%%=*}"
    if [[ " ${SWITCHES:-} " == *" $flag "* || ! -v "UP[$flag]" ]]; then
      die "unknown option for up: $arg (see --help)"
    fi
    if [[ "$arg" == *=* ]]; then
      UP[$flag]="${arg#*=}"
    else
      (($#)) || die "$flag takes a value"
      UP[$flag]="$1"
      shift
    fi
  done
}

check_workers() {
  [[ "$1" =~ ^[1-9][0-9]*$ ]] || die "--workers takes a whole number of 1 or more, not '$1'"
}

# Dies unless every argument is a port number and, for those after --free, nothing listens there.
check_ports() {
  local port free=false
  for port in "$@"; do
    if [[ "$port" == --free ]]; then
      free=true
    elif [[ "$free" == true ]]; then
      port_in_use "$port" && die "port $port on 127.0.0.1 is in use: pick another with the options of up"
    else
      [[ "$port" =~ ^[0-9]+$ ]] || die "a port is a number, not '$port'"
    fi
  done
  return 0
}

refuse_when_recorded() {
  if [[ -s "$STATE" ]]; then
    die "a cluster is already recorded in $STATE: run down first"
  fi
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

# True when PID is still the process recorded (same start time), not a later one with its id,
# and has not ended (a zombie, which its parent has yet to reap, has).
still_recorded() {
  local pid="$1" started="$2"
  kill -0 "$pid" 2>/dev/null && [[ "$(started_at "$pid")" == "$started" ]] &&
    [[ "$(ps -o stat= -p "$pid" 2>/dev/null)" != Z* ]]
}

# Stops every recorded process that is still the one recorded, and what it started, and forgets
# the cluster; false when none was recorded. All are asked to stop at once, the last started
# first (a JVM takes about 2 s to stop: one after another made `down` 8 s for 4 processes).
stop_all_recorded() {
  if [[ ! -s "$STATE" ]]; then
    # An `up` that stopped before its first process leaves its settings: they name no cluster.
    rm -f "$STATE" "$STATE_DIR/cluster.env"
    note "no local $CLUSTER cluster is recorded in $STATE: nothing to stop"
    return 1
  fi
  local name pid started i waited=0 names=() pids=() starts=()
  while IFS=$'\t' read -r name pid started; do
    if ! still_recorded "$pid" "$started"; then
      note "$name (pid $pid) is already gone"
      continue
    fi
    # The group holds what the process started (executors, Python SDK workers).
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    names+=("$name")
    pids+=("$pid")
    starts+=("$started")
  done < <(tac "$STATE")
  for i in "${!pids[@]}"; do
    while still_recorded "${pids[i]}" "${starts[i]}" && ((waited++ < 50)); do sleep 0.2; done
    if still_recorded "${pids[i]}" "${starts[i]}"; then
      kill -KILL -- "-${pids[i]}" 2>/dev/null || kill -KILL "${pids[i]}" 2>/dev/null || true
    fi
    note "stopped ${names[i]} (pid ${pids[i]})"
  done
  rm -f "$STATE" "$STATE_DIR/cluster.env"
}

cmd_status() {
  (($# == 0)) || die "status takes no options"
  if [[ ! -s "$STATE" ]]; then
    echo "no local $CLUSTER cluster is up"
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

# Runs cmd_up, cmd_down, cmd_status or cmd_fetch of the sourcing script, or prints its usage.
dispatch() {
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
