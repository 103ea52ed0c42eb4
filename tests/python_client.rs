//! The official Python `kubernetes` client against the real binary, with the admin
//! kubeconfig as is: reads, writes, watches, and server-side apply.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{run_bounded, Server};

const SCRIPT: &str = r#"
import sys, threading, time
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

kubeconfig, ns = sys.argv[1], sys.argv[2]
config.load_kube_config(config_file=kubeconfig)
v1 = client.CoreV1Api()

names = [n.metadata.name for n in v1.list_namespace().items]
for want in ["default", "kube-system", "kube-public", "kube-node-lease"]:
    assert want in names, f"namespace {want} missing from {names}"

v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
empty = v1.list_namespaced_config_map(ns)
assert empty.items == [], f"empty list: {empty.items!r}"
rv = empty.metadata.resource_version
assert rv, "list resourceVersion"

cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py", labels={"from": "python"}), data={"k": "v"})
created = v1.create_namespaced_config_map(ns, cm)
assert created.metadata.uid, "uid"
got = v1.read_namespaced_config_map("py", ns)
assert got.data == {"k": "v"}, got.data
assert got.metadata.labels == {"from": "python"}, got.metadata.labels

patched = v1.patch_namespaced_config_map("py", ns, {"data": {"k2": "v2"}})
assert patched.data == {"k": "v", "k2": "v2"}, patched.data

try:
    v1.create_namespaced_config_map(ns, cm)
    raise AssertionError("duplicate create succeeded")
except ApiException as e:
    assert e.status == 409, e

# A short watch from the list RV: sees the creation, the patch, and the delete made below.
seen = []
def later():
    time.sleep(0.5)
    v1.delete_namespaced_config_map("py", ns)
t = threading.Thread(target=later)
t.start()
w = watch.Watch()
for ev in w.stream(v1.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=3):
    seen.append((ev["type"], ev["object"].metadata.name))
    if ev["type"] == "DELETED":
        w.stop()
t.join()
types = [t for t, _ in seen]
assert types == ["ADDED", "MODIFIED", "DELETED"], seen

try:
    v1.read_namespaced_config_map("py", ns)
    raise AssertionError("read after delete succeeded")
except ApiException as e:
    assert e.status == 404, e

# A watch with nothing happening ends by itself after timeout_seconds.
w = watch.Watch()
extra = [ev for ev in w.stream(v1.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=2)
         if ev["object"].metadata.name != "py"]
assert extra == [], extra

# Server-side apply: creates, a second manager's conflicting apply is a 409 naming the field,
# force takes the field over (the first manager, left with nothing, is no longer listed).
APPLY = "application/apply-patch+yaml"
def config_map(color):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "py-apply"}, "data": {"color": color}}
applied = v1.patch_namespaced_config_map("py-apply", ns, config_map("blue"), field_manager="py-one", _content_type=APPLY)
assert applied.data == {"color": "blue"}, applied.data
assert [m.manager for m in applied.metadata.managed_fields] == ["py-one"], applied.metadata.managed_fields
try:
    v1.patch_namespaced_config_map("py-apply", ns, config_map("red"), field_manager="py-two", _content_type=APPLY)
    raise AssertionError("a conflicting apply succeeded")
except ApiException as e:
    assert e.status == 409, e
    assert ".data.color" in e.body, e.body
forced = v1.patch_namespaced_config_map(
    "py-apply", ns, config_map("red"), field_manager="py-two", force=True, _content_type=APPLY)
assert forced.data == {"color": "red"}, forced.data
managers = [m.manager for m in forced.metadata.managed_fields]
assert managers == ["py-two"], managers
v1.delete_namespaced_config_map("py-apply", ns)

v1.delete_namespace(ns)
print("python client OK")
"#;

#[test]
fn the_python_kubernetes_client_lists_creates_reads_watches_applies_and_deletes() {
    let check = Command::new("python3").args(["-c", "import kubernetes"]).output();
    match check {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "the Python `kubernetes` package is not installed ({}); run the README test command \
             `bash scripts/test.sh`, which installs it (python3 -m pip install 'kubernetes>=31')",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => panic!("python3 is not runnable ({e}); run the README test command `bash scripts/test.sh`"),
    }
    let s = Server::start_apiserver();
    let script = s.work_dir().join("client_test.py");
    std::fs::write(&script, SCRIPT).expect("writing the Python script");
    let ns = common::unique("py");
    let mut cmd = Command::new("python3");
    cmd.arg(&script).arg(&s.kubeconfig).arg(&ns).env_remove("KUBECONFIG");
    let out = run_bounded(&mut cmd, None, Duration::from_secs(120), "python3 client_test.py");
    assert!(
        out.status.success(),
        "the Python client script failed ({}):\nstdout:\n{}\nstderr:\n{}\nserver log tail:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        s.stderr_tail()
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("python client OK"));
}
