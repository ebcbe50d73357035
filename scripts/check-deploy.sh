#!/usr/bin/env bash
# Validates deploy/ (Kubernetes manifests, the endpoint picker's values)
# and the Dockerfile offline: `kubernetes-validate --strict` for the core
# kinds (schemas from its PyPI package), the vendored Inference Extension
# CRD schema for the InferencePool, and scripts/check-deploy.py's
# consistency checks. Then, where a container builder is installed and
# HASTEN_BUILD_IMAGE=1, builds the image and checks that it answers
# /health (the build pulls rust and debian images from Docker Hub).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${DEPLOY_VENV:-$root/target/deploy-venv}
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q kubernetes-validate==1.37.0 jsonschema==4.26.0 PyYAML==6.0.3
fi
cd "$root/deploy/kubernetes"
core=$(ls ./*.yaml | grep -v -e kustomization.yaml -e inferencepool.yaml)
# shellcheck disable=SC2086
"$venv/bin/kubernetes-validate" --strict --quiet -k 1.33.0 $core
"$venv/bin/python" "$root/scripts/check-deploy.py"

if [ "${HASTEN_BUILD_IMAGE:-0}" = 1 ]; then
  builder=$(command -v podman || command -v docker || true)
  [ -n "$builder" ] || { echo "check-deploy: no podman or docker to build with" >&2; exit 1; }
  "$builder" build -t hasten:check "$root"
  id=$("$builder" run -d -p 127.0.0.1:18000:8000 hasten:check)
  trap '"$builder" rm -f "$id" >/dev/null' EXIT
  for _ in $(seq 1 60); do
    if curl -sf http://127.0.0.1:18000/health >/dev/null; then echo "check-deploy: image answers /health"; exit 0; fi
    sleep 1
  done
  echo "check-deploy: the image never answered /health" >&2
  exit 1
fi
