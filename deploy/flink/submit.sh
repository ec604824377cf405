#!/usr/bin/env bash
# Submit sbert embed to Flink through Beam's FlinkRunner (deploy/flink/embed-flink.yaml).
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: deploy/flink/submit.sh [sbert submit options: --set KEY=VALUE, --dry-run]

needs FLINK_MASTER (host:8081), WORKER_IMAGE, CORPUS, OUTPUT.
Offline clusters: --set beam.flink_job_server_jar=/path/to/beam-runners-flink-1.20-job-server-2.77.0.jar
Uber-jar submission instead of a job server: --set beam.flink_submit_uber_jar=true
USAGE
}

case "${1:-}" in
  -h | --help | help)
    usage
    exit 0
    ;;
esac
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec sbert submit "$here/embed-flink.yaml" "$@"
