"""Offline validation of deploy/kubernetes, run by deploy/kubernetes/check.

usage: validate.py REPO_ROOT NAME=RENDERED.yaml [NAME=RENDERED.yaml ...]

Each RENDERED.yaml is one kustomization rendered by `kubectl kustomize`. Every object in it
must pass:

- Kubernetes objects: the Kubernetes OpenAPI schemas shipped in the kubernetes-validate
  wheel, strict (unknown fields refused), for every version in KUBE_VERSIONS;
- keda.sh/v1alpha1 ScaledObject: the Pydantic models generated from KEDA's CRDs
  (cloudcoil.models.keda), made strict by comparing the validated object with its input
  (the models drop unknown fields silently), and, for nats-jetstream triggers, the
  hand-written schema of the trigger's metadata (tools/schemas/);
- postgresql.cnpg.io/v1 Cluster: a hand-written JSON schema of the documented fields
  used (tools/schemas/cnpg-cluster.schema.json): no registry package ships CloudNativePG's
  CRD schema;
- anything else fails: an object nobody validates is an error;

and the cross-checks below (probes, ports, PDBs, Secrets, names shared with the code, the
NATS values file against nats.conf). Every error is printed; the exit status is 1 if any.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml
from cloudcoil.models.keda.v1alpha1 import ScaledObject

KUBE_VERSIONS = ["1.30.0", "1.32.0", "1.37.0"]

HERE = Path(__file__).resolve().parent
SCHEMAS = HERE / "schemas"

# Secrets the manifests may reference without creating them: made by the operator
# (docs/kubernetes.md) or by CloudNativePG. Anything else is a typo.
EXTERNAL_SECRETS = {
    "npcmem-nats-service": {"user", "password"},
    "npcmem-database": {"url"},
    "npcmem-llm": {"api-key", "embed-api-key"},
}
# Environment variables the services read that are not NPCMEM_*.
OTHER_ENV = {"RUST_LOG"}

errors: list[str] = []


def fail(where: str, message: str) -> None:
    errors.append(f"{where}: {message}")


def kn(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{obj.get('kind')}/{(ns + '/') if ns else ''}{meta.get('name')}"


# --- facts read from the code and the repository -------------------------------------


def env_names_in_code(root: Path) -> set[str]:
    names: set[str] = set()
    for path in list((root / "shared").rglob("*.rs")) + list((root / "services").rglob("*.rs")):
        names.update(re.findall(r'env = "(NPCMEM_[A-Z0-9_]+)"', path.read_text()))
    if not names:
        raise SystemExit("found no `env = \"NPCMEM_...\"` in shared/ and services/: wrong REPO_ROOT?")
    return names


def extract_consumer(root: Path) -> tuple[str, str]:
    """(stream kind suffix, consumer name) of npcmem-extract, from the code."""
    lib = (root / "services/extract/src/lib.rs").read_text()
    topo = (root / "shared/bus/src/topology.rs").read_text()
    name = re.search(r'pub const CONSUMER_EXTRACT: &str = "([^"]+)";', lib)
    kind = re.search(r"topology\.consumer\(CONSUMER_EXTRACT, StreamKind::(\w+),", lib)
    if not name or not kind:
        raise SystemExit("cannot find extract's consumer in services/extract/src/lib.rs")
    suffix = re.search(rf'StreamKind::{kind.group(1)} => "([A-Z_]+)"', topo)
    if not suffix:
        raise SystemExit(f"cannot find the suffix of StreamKind::{kind.group(1)} in topology.rs")
    # Both names are "<stream prefix>_<name>": check the code still builds them so.
    for pattern in ('format!("{}_{}", self.stream_prefix, kind.suffix())',
                    'format!("{}_{}", self.stream_prefix, name.replace('):
        if pattern not in topo:
            raise SystemExit(f"topology.rs no longer builds names with {pattern}: update validate.py")
    return suffix.group(1), name.group(1).replace(".", "_")


# --- a reader for nats.conf (the subset of the NATS config format it uses) -------------


class NatsConf:
    def __init__(self, text: str):
        self.s = text
        self.i = 0

    def skip(self, newlines: bool = True) -> None:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "#" or self.s.startswith("//", self.i):
                while self.i < len(self.s) and self.s[self.i] != "\n":
                    self.i += 1
            elif c in " \t\r" or (newlines and c in "\n,;"):
                self.i += 1
            else:
                return

    def parse(self) -> dict:
        return self.map_body(None)

    def map_body(self, end: str | None) -> dict:
        out: dict = {}
        while True:
            self.skip()
            if self.i >= len(self.s):
                if end:
                    raise ValueError("nats.conf: unterminated block")
                return out
            if self.s[self.i] == end:
                self.i += 1
                return out
            start = self.i
            while self.i < len(self.s) and self.s[self.i] not in " \t\r\n:={[":
                self.i += 1
            key = self.s[start:self.i]
            self.skip(newlines=False)
            if self.i < len(self.s) and self.s[self.i] in ":=":
                self.i += 1
            self.skip(newlines=False)
            out[key] = self.value()

    def value(self):
        c = self.s[self.i]
        if c == "{":
            self.i += 1
            return self.map_body("}")
        if c == "[":
            self.i += 1
            items = []
            while True:
                self.skip()
                if self.s[self.i] == "]":
                    self.i += 1
                    return items
                items.append(self.value())
        if c in "\"'":
            end = self.s.index(c, self.i + 1)
            text = self.s[self.i + 1:end]
            self.i = end + 1
            return text
        start = self.i
        while self.i < len(self.s) and self.s[self.i] not in "\n,;]}#":
            self.i += 1
        return self.s[start:self.i].strip()


def normalise_permissions(perms):
    """Permission lists compared as sets (order carries no meaning)."""
    if isinstance(perms, dict):
        return {k: normalise_permissions(v) for k, v in perms.items()}
    if isinstance(perms, list):
        return sorted(perms)
    return perms


# --- the NATS chart values ---------------------------------------------------------------


def check_nats_values(root: Path, values_path: Path, config: dict) -> dict:
    where = str(values_path.relative_to(root))
    values = yaml.safe_load(values_path.read_text())
    conf = NatsConf((root / "nats.conf").read_text()).parse()
    cfg = values.get("config") or {}

    cluster = cfg.get("cluster") or {}
    replicas = cluster.get("replicas")
    if not cluster.get("enabled") or not isinstance(replicas, int) or replicas < 3:
        fail(where, "config.cluster must be enabled with replicas >= 3 (R3 streams)")
    want = int(config.get("NPCMEM_STREAM_REPLICAS", "1"))
    if isinstance(replicas, int) and want > replicas:
        fail(where, f"NPCMEM_STREAM_REPLICAS={want} but the NATS cluster has {replicas} servers")

    js = cfg.get("jetstream") or {}
    fs = js.get("fileStore") or {}
    if not js.get("enabled") or not fs.get("enabled") or not (fs.get("pvc") or {}).get("enabled"):
        fail(where, "config.jetstream must be enabled with fileStore and its pvc enabled")
    if (js.get("memoryStore") or {}).get("enabled"):
        fail(where, "the services create file streams; memoryStore is unused")

    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}

    def quantity(text: str) -> int:
        m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)", str(text))
        if not m:
            raise ValueError(f"unsupported size {text!r} (use Ki/Mi/Gi/Ti)")
        return int(m.group(1)) * units[m.group(2)]

    pvc_size = quantity((fs.get("pvc") or {}).get("size", "10Gi"))
    max_size = quantity(fs.get("maxSize", (fs.get("pvc") or {}).get("size", "10Gi")))
    streams = (2 * int(config.get("NPCMEM_WORK_QUEUE_MAX_BYTES", 2**30))
               + 4 * int(config.get("NPCMEM_LIMITS_STREAM_MAX_BYTES", 2**30)))
    if max_size > pvc_size:
        fail(where, "jetstream.fileStore.maxSize is larger than its PVC")
    if streams > max_size:
        fail(where, f"the six streams reserve {streams} bytes per server, more than maxSize {max_size}")

    monitor = cfg.get("monitor") or {}
    if not monitor.get("enabled", True):
        fail(where, "config.monitor must stay enabled (chart probes, KEDA's /jsz)")

    merge = cfg.get("merge") or {}
    accounts = merge.get("accounts") or {}
    conf_accounts = conf.get("accounts") or {}
    if set(accounts) != set(conf_accounts):
        fail(where, f"accounts {sorted(accounts)} differ from nats.conf's {sorted(conf_accounts)}")
    env = (values.get("container") or {}).get("env") or {}
    for account, body in accounts.items():
        conf_body = conf_accounts.get(account) or {}
        if str(body.get("jetstream")) != str(conf_body.get("jetstream")):
            fail(where, f"account {account}: jetstream {body.get('jetstream')!r} differs from nats.conf")
        users = {u["user"]: u for u in body.get("users") or []}
        conf_users = {u["user"]: u for u in conf_body.get("users") or []}
        if set(users) != set(conf_users):
            fail(where, f"account {account}: users {sorted(users)} differ from nats.conf's {sorted(conf_users)}")
        for name in sorted(set(users) & set(conf_users)):
            if normalise_permissions(users[name].get("permissions")) != normalise_permissions(
                    conf_users[name].get("permissions")):
                fail(where, f"user {name}: permissions differ from nats.conf's")
            m = re.fullmatch(r"<<\s*\$(\w+)\s*>>", str(users[name].get("password")))
            if not m:
                fail(where, f"user {name}: password must be << $VARIABLE >> (from a Secret)")
                continue
            if "$" + m.group(1) != conf_users[name].get("password"):
                fail(where, f"user {name}: password variable ${m.group(1)} is not nats.conf's "
                            f"{conf_users[name].get('password')}")
            ref = ((env.get(m.group(1)) or {}).get("valueFrom") or {}).get("secretKeyRef")
            if not ref:
                fail(where, f"user {name}: container.env.{m.group(1)} must come from a Secret")
    payload = str(merge.get("max_payload", "")).strip("<> ").strip()
    if payload != str(conf.get("max_payload")):
        fail(where, f"max_payload {payload!r} differs from nats.conf's {conf.get('max_payload')!r}")
    return {"accounts": set(accounts), "monitor_port": monitor.get("port", 8222),
            "users": sum(len((b.get("users") or [])) for b in accounts.values())}


# --- per-kind validation ---------------------------------------------------------------------


def diff(expected, actual, path="") -> list[str]:
    """Where two JSON values differ (what a model dropped or coerced)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for k in expected.keys() | actual.keys():
            if k not in actual:
                out.append(f"{path}/{k}: not a field of the CRD (dropped)")
            elif k not in expected:
                out.append(f"{path}/{k}: added by the model")
            else:
                out += diff(expected[k], actual[k], f"{path}/{k}")
        return out
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in diff(e, a, f"{path}/{i}")]
    if expected != actual or type(expected) is not type(actual):
        return [f"{path}: {expected!r} read as {actual!r} (wrong type?)"]
    return []


def validate_scaled_object(where: str, obj: dict) -> None:
    try:
        model = ScaledObject.model_validate(obj)
    except Exception as error:  # pydantic.ValidationError, with every problem listed
        fail(where, f"not a valid KEDA ScaledObject:\n{error}")
        return
    for problem in diff(obj, model.model_dump(mode="json", by_alias=True, exclude_unset=True)):
        fail(where, problem)
    schema = json.loads((SCHEMAS / "keda-nats-jetstream-metadata.schema.json").read_text())
    for i, trigger in enumerate(obj["spec"]["triggers"]):
        if trigger.get("type") != "nats-jetstream":
            fail(where, f"trigger {i}: type {trigger.get('type')!r}; only nats-jetstream is checked here")
            continue
        for error in jsonschema.Draft202012Validator(schema).iter_errors(trigger.get("metadata") or {}):
            fail(where, f"trigger {i} metadata: {error.message}")


def validate_cnpg_cluster(where: str, obj: dict) -> None:
    schema = json.loads((SCHEMAS / "cnpg-cluster.schema.json").read_text())
    for error in jsonschema.Draft202012Validator(schema).iter_errors(obj):
        fail(where, f"{'/'.join(map(str, error.absolute_path)) or '(root)'}: {error.message}")


def validate_kubernetes(where: str, obj: dict) -> bool:
    for version in KUBE_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            fail(where, f"no Kubernetes {version} schema for {obj.get('apiVersion')} {obj.get('kind')}"
                        " and no other validator: unknown kind")
            return False
        except kubernetes_validate.ValidationError as error:
            path = "/".join(map(str, error.absolute_path)) or "(root)"
            fail(where, f"Kubernetes {version}: {path}: {error.message}")
            return False
    return True


# --- cross-checks on one rendered kustomization ------------------------------------------------


def pod_labels(deploy: dict) -> dict:
    return ((deploy["spec"]["template"].get("metadata") or {}).get("labels")) or {}


def selects(selector: dict, labels: dict) -> bool:
    match = (selector or {}).get("matchLabels", selector or {})
    return bool(match) and all(labels.get(k) == v for k, v in match.items())


def check_render(name: str, objs: list[dict], code_env: set[str], consumer: tuple[str, str],
                 nats: dict) -> dict:
    by_kind: dict[str, list[dict]] = {}
    for obj in objs:
        by_kind.setdefault(obj["kind"], []).append(obj)
    deployments = by_kind.get("Deployment", [])
    configmaps = {o["metadata"]["name"]: o for o in by_kind.get("ConfigMap", [])}
    clusters = by_kind.get("Cluster", [])
    external = dict(EXTERNAL_SECRETS)
    for cluster in clusters:  # CloudNativePG makes <cluster>-app for the application user
        external[cluster["metadata"]["name"] + "-app"] = {"username", "password", "uri", "host",
                                                          "port", "dbname", "jdbc-uri", "pgpass"}
    # ConfigMaps that become environment variables (envFrom): every key must be one a
    # service reads. Others (files mounted as volumes) are not checked here.
    env_sources = {src["configMapRef"]["name"] for d in deployments
                   for c in d["spec"]["template"]["spec"]["containers"]
                   for src in c.get("envFrom") or [] if src.get("configMapRef")}
    config = {}
    for cm in configmaps.values():
        if cm["metadata"]["name"] not in env_sources:
            continue
        data = cm.get("data") or {}
        config.update(data)
        for key in data:
            if key.startswith("NPCMEM_") and key not in code_env or (
                    not key.startswith("NPCMEM_") and key not in OTHER_ENV):
                fail(f"{name} {kn(cm)}", f"{key} is not read by any service (typo?)")

    for deploy in deployments:
        where = f"{name} {kn(deploy)}"
        dname = deploy["metadata"]["name"]
        spec = deploy["spec"]["template"]["spec"]
        if not (spec.get("securityContext") or {}).get("runAsNonRoot"):
            fail(where, "pod securityContext.runAsNonRoot must be true")
        annotations = (deploy["spec"]["template"].get("metadata") or {}).get("annotations") or {}
        for c in spec["containers"]:
            cw = f"{where} container {c['name']}"
            sc = c.get("securityContext") or {}
            if sc.get("readOnlyRootFilesystem") is not True or sc.get("allowPrivilegeEscalation") is not False:
                fail(cw, "needs readOnlyRootFilesystem: true and allowPrivilegeEscalation: false")
            if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
                fail(cw, "must drop ALL capabilities")
            if c.get("command") != [f"/usr/local/bin/{dname}"]:
                fail(cw, f"command {c.get('command')} does not run /usr/local/bin/{dname}")
            ports = {p.get("name"): p["containerPort"] for p in c.get("ports") or []}
            for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz"),
                                ("startupProbe", "/healthz")):
                get = (c.get(probe) or {}).get("httpGet") or {}
                if get.get("path") != path:
                    fail(cw, f"{probe} must GET {path}")
                elif get.get("port") not in ports and get.get("port") not in ports.values():
                    fail(cw, f"{probe} port {get.get('port')} is not a container port")
            res = c.get("resources") or {}
            req = (res.get("requests") or {}).get("memory")
            lim = (res.get("limits") or {}).get("memory")
            if not req or not lim:
                fail(cw, "needs memory requests and limits")
            env = {e["name"]: e for e in c.get("env") or []}
            for e in env.values():
                if e["name"].startswith("NPCMEM_") and e["name"] not in code_env:
                    fail(cw, f"env {e['name']} is not read by any service (typo?)")
                ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    keys = external.get(ref["name"])
                    if keys is None:
                        fail(cw, f"env {e['name']}: Secret {ref['name']} is neither expected nor made here")
                    elif ref["key"] not in keys:
                        fail(cw, f"env {e['name']}: Secret {ref['name']} has no key {ref['key']} "
                                 f"(expected: {', '.join(sorted(keys))})")
                ref = (e.get("valueFrom") or {}).get("configMapKeyRef")
                if ref and ref["name"] not in configmaps:
                    fail(cw, f"env {e['name']}: ConfigMap {ref['name']} is not in the render")
            for src in c.get("envFrom") or []:
                ref = src.get("configMapRef")
                if ref and ref["name"] not in configmaps:
                    fail(cw, f"envFrom: ConfigMap {ref['name']} is not in the render")
            addr = (env.get("NPCMEM_HTTP_ADDR") or {}).get("value", "")
            m = re.fullmatch(r"0\.0\.0\.0:(\d+)|\[::\]:(\d+)", addr)
            if not m:
                fail(cw, f"NPCMEM_HTTP_ADDR {addr!r} must listen on all addresses (0.0.0.0:PORT)")
            else:
                port = int(m.group(1) or m.group(2))
                if ports.get("http") != port:
                    fail(cw, f"NPCMEM_HTTP_ADDR port {port} is not the container port 'http'")
                if annotations.get("prometheus.io/scrape") != "true" or \
                        annotations.get("prometheus.io/port") != str(port):
                    fail(where, f"pod annotations must scrape /metrics on port {port}")
        pdbs = [p for p in by_kind.get("PodDisruptionBudget", []) if selects(p["spec"].get("selector"), pod_labels(deploy))]
        if len(pdbs) != 1:
            fail(where, f"{len(pdbs)} PodDisruptionBudgets select it (want 1)")

    for svc in by_kind.get("Service", []):
        where = f"{name} {kn(svc)}"
        targets = [d for d in deployments if selects(svc["spec"].get("selector"), pod_labels(d))]
        if not targets:
            fail(where, "selects no Deployment")
        for port in svc["spec"].get("ports") or []:
            for d in targets:
                names = {p.get("name") for c in d["spec"]["template"]["spec"]["containers"] for p in c.get("ports") or []}
                if isinstance(port.get("targetPort"), str) and port["targetPort"] not in names:
                    fail(where, f"targetPort {port['targetPort']} is not a port of {kn(d)}")

    prefix = config.get("NPCMEM_STREAM_PREFIX", "NPCMEM")
    stream_want, consumer_want = f"{prefix}_{consumer[0]}", f"{prefix}_{consumer[1]}"
    for so in by_kind.get("ScaledObject", []):
        where = f"{name} {kn(so)}"
        target = so["spec"]["scaleTargetRef"]["name"]
        found = [d for d in deployments if d["metadata"]["name"] == target]
        if not found:
            fail(where, f"scaleTargetRef {target} is not a Deployment of the render")
        elif "replicas" in found[0]["spec"]:
            fail(where, f"{target} still sets spec.replicas, which would fight KEDA's HPA")
        for trigger in so["spec"]["triggers"]:
            meta = trigger.get("metadata") or {}
            if meta.get("stream") != stream_want or meta.get("consumer") != consumer_want:
                fail(where, f"trigger reads {meta.get('stream')}/{meta.get('consumer')}, but extract "
                            f"consumes {stream_want}/{consumer_want} (code + NPCMEM_STREAM_PREFIX)")
            if meta.get("account") not in nats["accounts"]:
                fail(where, f"account {meta.get('account')} is not an account of nats/values.yaml")
            host, _, port = meta.get("natsServerMonitoringEndpoint", "").partition(":")
            if port != str(nats["monitor_port"]):
                fail(where, f"monitoring port {port} is not the chart's monitor port {nats['monitor_port']}")
            ns = so["metadata"].get("namespace")
            labels = host.split(".")
            if not host.startswith("nats-headless.") or (ns and (len(labels) < 2 or labels[1] != ns)):
                fail(where, f"endpoint {host} must be the chart's headless Service in the namespace "
                            f"{ns or 'of NATS'} (nats-headless.<namespace>.svc...)")
    return {"objects": len(objs), "kinds": {k: len(v) for k, v in sorted(by_kind.items())}}


def check_image(root: Path, deployments: list[dict]) -> int:
    """Every binary a Deployment runs is built into the image and is a binary of the workspace."""
    dockerfile = HERE.parent / "Dockerfile"
    built = set(re.findall(r"--bin (\S+)", dockerfile.read_text()))
    crates = set()
    for manifest in (root / "services").glob("*/Cargo.toml"):
        crates.update(re.findall(r'\[\[bin\]\]\s*\nname = "([^"]+)"', manifest.read_text()))
    for name in sorted(built - crates):
        fail("deploy/kubernetes/Dockerfile", f"--bin {name} is not a binary of services/*/Cargo.toml")
    for deploy in deployments:
        for c in deploy["spec"]["template"]["spec"]["containers"]:
            binary = Path((c.get("command") or [""])[0]).name
            if binary not in built:
                fail(f"{kn(deploy)}", f"runs {binary}, which deploy/kubernetes/Dockerfile does not build")
    return len(built)


def main(argv: list[str]) -> int:
    root = Path(argv[1]).resolve()
    renders = [arg.split("=", 1) for arg in argv[2:]]
    code_env = env_names_in_code(root)
    consumer = extract_consumer(root)
    base_config: dict = {}
    summaries = []
    loaded = []
    for name, path in renders:
        objs = [o for o in yaml.safe_load_all(Path(path).read_text()) if o]
        loaded.append((name, objs))
        for o in objs:
            if o["kind"] == "ConfigMap" and (o.get("data") or {}).get("NPCMEM_STREAM_REPLICAS"):
                base_config.update(o["data"])
    nats = check_nats_values(root, HERE.parent / "nats" / "values.yaml", base_config)

    counts = {"kubernetes": 0, "keda": 0, "cnpg": 0}
    for name, objs in loaded:
        for obj in objs:
            where = f"{name} {kn(obj)}"
            api, kind = obj.get("apiVersion", ""), obj.get("kind", "")
            if api == "keda.sh/v1alpha1" and kind == "ScaledObject":
                validate_scaled_object(where, obj)
                counts["keda"] += 1
            elif api == "postgresql.cnpg.io/v1" and kind == "Cluster":
                validate_cnpg_cluster(where, obj)
                counts["cnpg"] += 1
            elif validate_kubernetes(where, obj):
                counts["kubernetes"] += 1
        try:
            summary = check_render(name, objs, code_env, consumer, nats)
        except (KeyError, TypeError, IndexError, AttributeError) as error:
            # An object too malformed to cross-check; the schema errors above say why.
            fail(name, f"cross-checks stopped at a malformed object ({type(error).__name__}: {error})")
            continue
        kinds = ", ".join(f"{n} {k}" for k, n in summary["kinds"].items())
        summaries.append(f"  {name}: {summary['objects']} objects ({kinds})")

    binaries = check_image(root, [o for _, objs in loaded for o in objs if o["kind"] == "Deployment"])

    if errors:
        print(f"deploy/kubernetes: {len(errors)} error(s):", file=sys.stderr)
        for e in errors:
            print(f"  ERROR {e}", file=sys.stderr)
        return 1
    print("rendered and validated:")
    print("\n".join(summaries))
    print(f"  {counts['kubernetes']} Kubernetes objects against the OpenAPI schemas of "
          f"{', '.join(KUBE_VERSIONS)} (kubernetes-validate {kubernetes_validate.__version__}, strict)")
    print(f"  {counts['keda']} KEDA ScaledObject(s) against KEDA 2.16.1's CRD models (cloudcoil), "
          "nats-jetstream metadata against tools/schemas, stream/consumer against the code")
    print(f"  {counts['cnpg']} CloudNativePG Cluster(s) against tools/schemas/cnpg-cluster.schema.json")
    print(f"  nats/values.yaml: {nats['users']} users and their permissions equal nats.conf's; "
          "R3 storage fits the streams")
    print(f"  Dockerfile: its {binaries} --bin are workspace binaries and include every one a Deployment runs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
