#!/usr/bin/env bash
# Submit sbert embed to Spark: `runner` starts Beam's Spark job server itself (SparkRunner),
# `portable` talks to one that is already running (PortableRunner).
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: deploy/spark/submit.sh runner|portable [sbert submit options: --set KEY=VALUE, --dry-run]

  runner    deploy/spark/embed-spark.yaml     needs SPARK_MASTER, WORKER_IMAGE, CORPUS, OUTPUT
  portable  deploy/spark/embed-portable.yaml  needs JOB_ENDPOINT, CORPUS, OUTPUT

Offline clusters: --set beam.spark_job_server_jar=/path/to/beam-runners-spark-3-job-server-2.77.0.jar
Uber-jar submission instead of a job server (runner mode):
  --set beam.spark_submit_uber_jar=true --set beam.spark_rest_url=http://spark-master:6066
USAGE
}

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in
  runner) config="$here/embed-spark.yaml" ;;
  portable) config="$here/embed-portable.yaml" ;;
  -h | --help | help)
    usage
    exit 0
    ;;
  *)
    usage >&2
    exit 2
    ;;
esac
shift
exec sbert submit "$config" "$@"
