#!/usr/bin/env bash
# Build the images and flex template for sbert embed on Dataflow, and run it.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: deploy/dataflow/submit.sh COMMAND [ARGS...]

  images                 build and push WORKER_IMAGE (GPU), WORKER_IMAGE_CPU if set, and
                         LAUNCHER_IMAGE with Cloud Build (BUILDER=docker: local docker build)
  template               write the flex template spec to TEMPLATE_PATH
  run INPUT OUTPUT [...] launch the flex template on GPU workers; further arguments go to
                         `gcloud dataflow flex-template run`
  submit [CONFIG] [...]  run `sbert submit CONFIG` from this machine (default CONFIG:
                         deploy/dataflow/embed-gpu.yaml); further arguments go to sbert submit

environment:
  GCP_PROJECT, GCP_REGION, GCS_BUCKET   always
  WORKER_IMAGE                          images, run, submit (e.g. REGION-docker.pkg.dev/P/R/worker-gpu:TAG)
  LAUNCHER_IMAGE                        images, template
  WORKER_IMAGE_CPU                      optional, images
  TEMPLATE_PATH                         optional, default gs://$GCS_BUCKET/templates/sbert-embed.json
USAGE
}

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

require() {
  local missing=() name
  for name in "$@"; do
    [[ -n "${!name:-}" ]] || missing+=("$name")
  done
  if ((${#missing[@]})); then
    echo "submit.sh: set ${missing[*]} (see --help)" >&2
    exit 2
  fi
}

# build_image DOCKERFILE IMAGE: the build context is the repository root in both cases.
build_image() {
  local dockerfile="$1" image="$2"
  if [[ "${BUILDER:-cloudbuild}" == docker ]]; then
    docker build -f "$root/$dockerfile" -t "$image" "$root"
    docker push "$image"
    return
  fi
  # `gcloud builds submit --tag` only finds a Dockerfile at the root, hence a one-step config.
  local config="$workdir/cloudbuild-${dockerfile//\//-}.yaml"
  cat >"$config" <<CONFIG
steps:
  - name: gcr.io/cloud-builders/docker
    args: [build, -f, "$dockerfile", -t, "$image", .]
images: ["$image"]
timeout: 3600s
options:
  machineType: E2_HIGHCPU_8
  diskSizeGb: 200
CONFIG
  gcloud builds submit "$root" --project "$GCP_PROJECT" --region "$GCP_REGION" --config "$config"
}

command="${1:-}"
if [[ $# -gt 0 ]]; then
  shift
fi
case "$command" in
  images)
    require GCP_PROJECT GCP_REGION WORKER_IMAGE LAUNCHER_IMAGE
    workdir="$(mktemp -d)"
    trap 'rm -rf "$workdir"' EXIT
    build_image deploy/docker/Dockerfile.worker "$WORKER_IMAGE"
    if [[ -n "${WORKER_IMAGE_CPU:-}" ]]; then
      build_image deploy/docker/Dockerfile.cpu "$WORKER_IMAGE_CPU"
    fi
    build_image deploy/dataflow/flex-template/Dockerfile "$LAUNCHER_IMAGE"
    ;;
  template)
    require GCP_PROJECT GCP_REGION GCS_BUCKET LAUNCHER_IMAGE
    gcloud dataflow flex-template build "${TEMPLATE_PATH:-gs://$GCS_BUCKET/templates/sbert-embed.json}" \
      --project "$GCP_PROJECT" \
      --image "$LAUNCHER_IMAGE" \
      --sdk-language PYTHON \
      --metadata-file "$here/flex-template/metadata.json"
    ;;
  run)
    if [[ $# -lt 2 ]]; then
      usage >&2
      exit 2
    fi
    require GCP_PROJECT GCP_REGION GCS_BUCKET WORKER_IMAGE
    input="$1" output="$2"
    shift 2
    # `^~^` switches gcloud's list separator from ',' to '~' (see `gcloud topic escaping`), so
    # values may contain commas (an input glob such as gs://b/{a,b}/*.txt).
    parameters="^~^input=$input~output=$output~keep-text=true~device=cuda~compute-dtype=float16"
    parameters+="~sdk_container_image=$WORKER_IMAGE~sdk_location=container"
    parameters+="~dataflow_service_options=worker_accelerator=type:nvidia-l4;count:1;install-nvidia-driver:5xx"
    parameters+="~number_of_worker_harness_threads=1~disk_size_gb=100"
    gcloud dataflow flex-template run "sbert-embed-$(date -u +%Y%m%d-%H%M%S)" \
      --project "$GCP_PROJECT" \
      --region "$GCP_REGION" \
      --template-file-gcs-location "${TEMPLATE_PATH:-gs://$GCS_BUCKET/templates/sbert-embed.json}" \
      --staging-location "gs://$GCS_BUCKET/staging" \
      --temp-location "gs://$GCS_BUCKET/tmp" \
      --worker-machine-type g2-standard-8 \
      --max-workers 4 \
      --additional-experiments use_runner_v2 \
      --parameters "$parameters" \
      "$@"
    ;;
  submit)
    require GCP_PROJECT GCP_REGION GCS_BUCKET WORKER_IMAGE
    config="$here/embed-gpu.yaml"
    if [[ $# -gt 0 && "$1" != -* ]]; then
      config="$1"
      shift
    fi
    exec sbert submit "$config" "$@"
    ;;
  -h | --help | help)
    usage
    ;;
  *)
    usage >&2
    exit 2
    ;;
esac
