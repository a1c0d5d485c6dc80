"""Checks deploy/kubernetes/ (issue 20), run by scripts/test:

1. yamllint (tests/deploy/yamllint.yaml);
2. every core Kubernetes object against the API's own schema, strictly (kubernetes-validate,
   for KUBERNETES_VERSION);
3. every Inference Extension object against the schemas vendored in tests/deploy/schemas/
   (README.md there names their source and version);
4. what troupe itself needs of them: each ConfigMap JSON config parses and keeps its server on
   0.0.0.0:8080; a Deployment's grace period outlasts drain_timeout_ms + http.shutdown_grace_ms;
   readiness is /health on the serving port; every --prefill-url names a Service of this
   directory; every pool selects pods some Deployment labels.

Usage: python tests/deploy/check_manifests.py [deploy/kubernetes]
"""
import json
import pathlib
import subprocess
import sys

import jsonschema
import kubernetes_validate
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
KUBERNETES_VERSION = "1.33.0"
CRD_SCHEMAS = {
    ("inference.networking.k8s.io/v1", "InferencePool"): "inferencepool-v1.json",
    ("inference.networking.x-k8s.io/v1alpha2", "InferenceObjective"): "inferenceobjective-v1alpha2.json",
}


def load(directory):
    objects = []
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                objects.append((path.name, doc))
    return objects


def configs_of(objects):
    out = {}
    for _, obj in objects:
        if obj["kind"] == "ConfigMap":
            for key, text in obj.get("data", {}).items():
                if key.endswith(".json"):
                    out[(obj["metadata"]["name"], key)] = json.loads(text)
    return out


def check_deployment(name, obj, configs, services, errors):
    spec = obj["spec"]["template"]["spec"]
    grace = spec.get("terminationGracePeriodSeconds", 30)
    for c in spec["containers"]:
        args = c.get("args", [])
        flag = lambda f: args[args.index(f) + 1] if f in args else None  # noqa: E731
        config_path = flag("--config")
        mounted = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        config = None
        for mount, volume in mounted.items():
            if config_path and config_path.startswith(mount + "/"):
                cm = volumes[volume]["configMap"]["name"]
                config = configs.get((cm, config_path[len(mount) + 1:]))
        if config is None:
            errors.append(f"{name}: --config {config_path} is no key of a ConfigMap mounted there")
            continue
        http = config.get("http", {})
        if http.get("host") != "0.0.0.0" or http.get("port") != 8080:
            errors.append(f"{name}: the config must serve on 0.0.0.0:8080")
        drain_s = (config.get("drain_timeout_ms", 30000) + http.get("shutdown_grace_ms", 5000)) / 1000
        if grace <= drain_s:
            errors.append(f"{name}: terminationGracePeriodSeconds {grace} <= drain + grace {drain_s}s")
        probe = c.get("readinessProbe", {}).get("httpGet", {})
        if probe.get("path") != "/health" or probe.get("port") not in ("http", 8080):
            errors.append(f"{name}: readiness must be GET /health on the serving port")
        if "preStop" not in c.get("lifecycle", {}):
            errors.append(f"{name}: no preStop hook")
        prefill = flag("--prefill-url")
        if prefill is not None:
            host, _, port = prefill.partition(":")
            if (host, int(port)) not in services:
                errors.append(f"{name}: --prefill-url {prefill} is no Service port here")


def main():
    directory = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "deploy" / "kubernetes"
    errors = []
    lint = subprocess.run([sys.executable, "-m", "yamllint", "-s", "-c", str(HERE / "yamllint.yaml"),
                           str(directory)], capture_output=True, text=True)
    if lint.returncode != 0:
        errors.append("yamllint:\n" + lint.stdout + lint.stderr)
    objects = load(directory)
    if not objects:
        errors.append(f"no manifests in {directory}")
    configs = configs_of(objects)
    services = {(o["metadata"]["name"], p["port"]) for _, o in objects if o["kind"] == "Service"
                for p in o["spec"]["ports"]}
    pod_labels = [o["spec"]["template"]["metadata"]["labels"] for _, o in objects
                  if o["kind"] == "Deployment"]
    kinds = set()
    for file, obj in objects:
        where = f"{file}: {obj.get('kind')} {obj.get('metadata', {}).get('name')}"
        kinds.add(obj["kind"])
        key = (obj.get("apiVersion"), obj.get("kind"))
        try:
            if key in CRD_SCHEMAS:
                schema = json.loads((HERE / "schemas" / CRD_SCHEMAS[key]).read_text())
                jsonschema.validate(obj, schema)
                if obj["kind"] == "InferencePool":
                    wanted = obj["spec"]["selector"]["matchLabels"].items()
                    if not any(wanted <= labels.items() for labels in pod_labels):
                        errors.append(f"{where}: selects no Deployment's pods")
            else:
                kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except (jsonschema.ValidationError, kubernetes_validate.ValidationError,
                kubernetes_validate.SchemaNotFoundError) as e:
            errors.append(f"{where}: {getattr(e, 'message', e)}")
            continue
        if obj["kind"] == "Deployment":
            check_deployment(where, obj, configs, services, errors)
    for error in errors:
        print("FAIL", error)
    print(f"deploy manifests: {len(objects)} objects ({', '.join(sorted(kinds))}) checked, "
          f"{len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
