#!/usr/bin/env bash
# Resource requests and limits for deploy/kubernetes/deployment.yaml, sized
# from `hasten estimate` for a model: memory = the weights (mapped from the
# file, resident once read) + the KV cache (--kv-cache-mib) + 512 MiB for
# the runtime and activations; CPU = the model threads (one per core).
# Prints a strategic-merge patch for a kustomize overlay.
#
# Usage: deploy/size.sh MODEL [KV_CACHE_MIB] [CPUS]
#   MODEL: a GGUF file, a config.json or a preset (`hasten estimate --list`);
#   KV_CACHE_MIB default 1024; CPUS default 2. HASTEN=path/to/hasten.
set -euo pipefail
model=${1:?usage: deploy/size.sh MODEL [KV_CACHE_MIB] [CPUS]}
kv_mib=${2:-1024}
cpus=${3:-2}
hasten=${HASTEN:-hasten}
weights=$("$hasten" estimate --model "$model" --json | python3 -c \
  'import json,sys; print(int(json.load(sys.stdin)["estimate"]["weight_bytes"]))')
mib=$(( (weights >> 20) + kv_mib + 512 ))
cat <<PATCH
# deploy/size.sh $model $kv_mib $cpus: weights $((weights >> 20)) MiB + KV $kv_mib MiB + 512 MiB
apiVersion: apps/v1
kind: Deployment
metadata:
  name: hasten
spec:
  template:
    spec:
      containers:
        - name: hasten
          resources:
            requests:
              cpu: "$cpus"
              memory: ${mib}Mi
            limits:
              cpu: "$cpus"
              memory: ${mib}Mi
PATCH
