"""Consistency checks of deploy/ that the schemas cannot make: every manifest is in the
kustomization (or meant to stay out), names referenced between manifests exist, the compose file
refers only to what it declares and to stages the Containerfile has, and the configuration files
embedded in manifests are written out for the binaries to check."""
import json
import pathlib
import re
import sys

import jsonschema
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
KUBE = ROOT / "deploy" / "kubernetes"
errors = []


def check(ok, message):
    if not ok:
        errors.append(message)


def kubernetes(out_dir):
    kustomization = yaml.safe_load((KUBE / "kustomization.yaml").read_text())
    listed = kustomization["resources"]
    present = sorted(p.name for p in KUBE.glob("*.yaml") if p.name != "kustomization.yaml")
    outside = {"secret.example.yaml"}  # secrets are created by the operator, never committed
    for name in listed:
        check((KUBE / name).is_file(), f"kustomization.yaml lists {name}, which does not exist")
    for name in present:
        check(name in listed or name in outside, f"{name} is in neither kustomization.yaml nor the exceptions")
    images = {i["name"] for i in kustomization.get("images", [])}
    docs = {name: list(yaml.safe_load_all((KUBE / name).read_text())) for name in present}
    configmaps = {d["metadata"]["name"]: d for ds in docs.values() for d in ds if d["kind"] == "ConfigMap"}
    secrets = {d["metadata"]["name"]: d for ds in docs.values() for d in ds if d["kind"] == "Secret"}
    services = {d["metadata"]["name"]: d for ds in docs.values() for d in ds if d["kind"] == "Service"}
    for name, ds in docs.items():
        for doc in ds:
            if doc["kind"] in ("Deployment", "DaemonSet"):
                template = doc["spec"]["template"]
                selector = doc["spec"]["selector"]["matchLabels"]
                labels = template["metadata"]["labels"]
                check(all(labels.get(k) == v for k, v in selector.items()),
                      f"{name}: the selector does not match the pod labels")
                for container in template["spec"]["containers"]:
                    check(container["image"] in images,
                          f"{name}: image {container['image']} has no entry in kustomization.yaml images")
                    for env in container.get("env", []):
                        ref = env.get("valueFrom", {}).get("secretKeyRef")
                        if ref:
                            secret = secrets.get(ref["name"])
                            check(secret is not None and ref["key"] in secret.get("stringData", {}),
                                  f"{name}: secret {ref['name']}/{ref['key']} is not in secret.example.yaml")
                for volume in template["spec"].get("volumes", []):
                    if "configMap" in volume:
                        check(volume["configMap"]["name"] in configmaps,
                              f"{name}: ConfigMap {volume['configMap']['name']} is not defined")
            if doc["kind"] == "Ingress":
                for rule in doc["spec"]["rules"]:
                    for path in rule["http"]["paths"]:
                        backend = path["backend"]["service"]["name"]
                        check(backend in services, f"{name}: Ingress backend {backend} is not a Service")
    # The configuration files inside the ConfigMaps, for `--check-config` by the binaries.
    for cm in configmaps.values():
        for key, text in cm.get("data", {}).items():
            (out_dir / f"configmap-{cm['metadata']['name']}-{key}").write_text(text)


def compose(schema_path):
    path = ROOT / "deploy" / "compose" / "compose.yaml"
    doc = yaml.safe_load(path.read_text())
    schema = json.loads(pathlib.Path(schema_path).read_text())
    for error in jsonschema.Draft7Validator(schema).iter_errors(doc):
        errors.append(f"compose.yaml: {'/'.join(map(str, error.path))}: {error.message}")
    services = doc.get("services", {})
    volumes = set(doc.get("volumes", {}))
    stages = set(re.findall(r"^FROM \S+ AS (\S+)", (ROOT / "deploy/container/Containerfile").read_text(), re.M))
    check({"mariadb", "admin-1", "admin-2", "agent-1", "agent-2"} <= set(services),
          "compose.yaml: MariaDB, two admins and two agents are expected")
    for name, service in services.items():
        for dep in service.get("depends_on", {}):
            check(dep in services, f"compose.yaml: {name} depends on unknown service {dep}")
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            check(source in volumes or source.startswith((".", "/")),
                  f"compose.yaml: {name} mounts undeclared volume {source}")
        build = service.get("build")
        if build:
            check((ROOT / "deploy/compose" / build["context"] / build["dockerfile"]).is_file(),
                  f"compose.yaml: {name} builds from a missing file")
            check(build.get("target") in stages, f"compose.yaml: {name} builds unknown stage {build.get('target')}")


if __name__ == "__main__":
    out = pathlib.Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    kubernetes(out)
    compose(sys.argv[1])
    for e in errors:
        print(e, file=sys.stderr)
    sys.exit(1 if errors else 0)
