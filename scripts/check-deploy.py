"""Offline checks of deploy/ and the Dockerfile (run by check-deploy.sh).

- Core Kubernetes manifests: `kubernetes-validate --strict` (the package
  ships the API schemas) runs beside this script.
- The InferencePool: validated against the Inference Extension's CRD
  schema vendored in deploy/schemas/.
- kustomization.yaml lists every manifest in its folder, and they exist.
- deploy/epp-values.yaml: its embedded EndpointPickerConfig parses, has
  the core-metrics-extractor with a "hasten" engine config naming all four
  protocol metrics, and the plugins the profile references.
- The Dockerfile: a build stage and a runtime stage, the binary copied
  from the build, a non-root USER, a HEALTHCHECK on /health, the port the
  Deployment uses, and a Rust image no older than Cargo.toml's
  rust-version.
"""
import pathlib
import re
import sys

import jsonschema
import yaml

root = pathlib.Path(__file__).resolve().parent.parent
deploy = root / "deploy"
errors = []


def check(ok, what):
    if not ok:
        errors.append(what)


# The InferencePool against the vendored CRD's schema.
crd = yaml.safe_load((deploy / "schemas/inference.networking.k8s.io_inferencepools.yaml").read_text())
schemas = {v["name"]: v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"]}
pool = yaml.safe_load((deploy / "kubernetes/inferencepool.yaml").read_text())
group, version = pool["apiVersion"].split("/")
check(group == crd["spec"]["group"] and pool["kind"] == crd["spec"]["names"]["kind"], "InferencePool kind/group")
check(version in schemas, f"InferencePool version {version} not in the CRD")
try:
    jsonschema.validate(pool, schemas[version])
except jsonschema.ValidationError as e:
    errors.append(f"inferencepool.yaml: {e.message} at {list(e.absolute_path)}")

# kustomization covers the folder.
k = yaml.safe_load((deploy / "kubernetes/kustomization.yaml").read_text())
listed = set(k["resources"])
present = {p.name for p in (deploy / "kubernetes").glob("*.yaml")} - {"kustomization.yaml"}
check(listed == present, f"kustomization resources {sorted(listed)} != files {sorted(present)}")

# The Deployment's selector matches the pool's, the Service's and the PDB's.
dep = yaml.safe_load((deploy / "kubernetes/deployment.yaml").read_text())
labels = dep["spec"]["template"]["metadata"]["labels"]
for f in ["inferencepool.yaml", "service.yaml", "pdb.yaml"]:
    d = yaml.safe_load((deploy / "kubernetes" / f).read_text())
    sel = d["spec"]["selector"]
    sel = sel.get("matchLabels", sel)
    check(all(labels.get(a) == b for a, b in sel.items()), f"{f} selector {sel} misses the pods {labels}")
port = dep["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
check(pool["spec"]["targetPorts"][0]["number"] == port, "pool targetPort != containerPort")
grace = dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
drain = int(next(a.split("=")[1] for a in args if a.startswith("--shutdown-timeout=")))
pre = dep["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
check(grace > drain + pre, f"terminationGracePeriodSeconds {grace} <= drain {drain} + preStop {pre}")

# The endpoint picker's values.
values = yaml.safe_load((deploy / "epp-values.yaml").read_text())
epp = values["router"]["epp"]
cfg = yaml.safe_load(epp["pluginsCustomConfig"][epp["pluginsConfigFile"]])
check(cfg["kind"] == "EndpointPickerConfig", "EPP config kind")
plugins = {p.get("name", p["type"]): p for p in cfg["plugins"]}
ext = plugins.get("core-metrics-extractor", {}).get("parameters", {})
engines = {e["name"]: e for e in ext.get("engineConfigs", [])}
check(ext.get("defaultEngine") in engines, "defaultEngine has no engine config")
hasten = engines.get("hasten", {})
for spec in ["queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec", "cacheInfoSpec"]:
    check(re.fullmatch(r"hasten_[a-z_]+", hasten.get(spec, "")) is not None, f"engine config {spec}")
check(labels.get("llm-d.ai/engine-type") in engines, "pods' engine-type label has no engine config")
for prof in cfg["schedulingProfiles"]:
    for ref in prof["plugins"]:
        check(ref["pluginRef"] in plugins, f"profile references unknown plugin {ref['pluginRef']}")
check(values["router"]["modelServers"]["matchLabels"].items() <= labels.items(), "EPP matchLabels miss the pods")
check(values["router"]["inferencePool"]["create"] is False, "the pool is deploy/kubernetes's")
check(pool["spec"]["endpointPickerRef"]["name"] == "hasten-epp", "pool's picker is release hasten's Service")

# The Dockerfile's stages.
docker = (root / "Dockerfile").read_text()
stages = re.findall(r"^FROM\s+(\S+)\s+AS\s+(\S+)", docker, re.M)
names = [s[1] for s in stages]
check(names[:1] == ["build"] and "runtime" in names and names[-1] == "runtime", f"stages {names}")
m = re.search(r"rust:(\d+)\.(\d+)", stages[0][0]) if stages else None
want = re.search(r'rust-version\s*=\s*"(\d+)\.(\d+)"', (root / "Cargo.toml").read_text())
check(m is not None and want is not None and tuple(map(int, m.groups())) >= tuple(map(int, want.groups())),
      "build image older than rust-version")
runtime = docker.split("AS runtime", 1)[-1]
check(re.search(r"^COPY --from=build \S+ /usr/local/bin/hasten$", runtime, re.M) is not None, "binary not copied from build")
user = re.findall(r"^USER\s+(\S+)", runtime, re.M)
check(user and user[-1].split(":")[0] not in ("0", "root"), f"runtime USER {user}")
check(re.search(r"^HEALTHCHECK .*?/health", runtime, re.M | re.S) is not None, "no HEALTHCHECK on /health")
check(f"EXPOSE {port}" in runtime, f"EXPOSE {port} missing")
check('ENTRYPOINT ["hasten"]' in runtime, "ENTRYPOINT")
run_as = dep["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
check(user and user[-1].split(":")[0] == str(run_as), "image USER != pod runAsUser")

for e in errors:
    print(f"check-deploy: {e}", file=sys.stderr)
print(f"check-deploy: {'FAILED' if errors else 'ok'} ({len(errors)} problems)")
sys.exit(1 if errors else 0)
