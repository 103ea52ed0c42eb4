#!/usr/bin/env python3
"""What field ownership (managedFields, server-side apply) costs the server: peak RSS and CPU
seconds of one request each, read from /proc/<pid> (VmHWM reset before each request with
clear_refs; utime + stime).

    scripts/bench-managed-fields.py <kustos binary> [case,case,...]

For each case, starts `<binary> apiserver` on a fresh data directory under an address-space
limit (BENCH_AS_LIMIT_KB, default 6 GiB, so a server that blows up aborts instead of taking
the machine), issues a node and an admin client certificate with openssl from the cluster
CA, and sends one request, a dry run:

  plain      a node's mirror pod: one container named by 100 KB with 9,000 variables (0.36 MB)
  forged     the same with three forged managedFields entries, each owning the 27,000 fields
             of the variables below the container's 100 KB key (2.25 MB)
  apply      the admin's server-side apply of a pod: a 500 KB container name, 20,000
             variables (1.09 MB)
  applyshort the same with a one-letter container name and 40,000 variables (1.19 MB)
  nodeapply  a node's server-side apply creating its own Node, 15,000 conditions (1.22 MB)

Python standard library and openssl only.
"""
import http.client
import json
import os
import resource
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time

NODE = "n1"


def start(binary, work, limit_kb):
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit_kb * 1024, limit_kb * 1024))

    err = open(os.path.join(work, "stderr.log"), "w")
    proc = subprocess.Popen(
        [binary, "apiserver", "--data-dir", os.path.join(work, "data"), "--secure-port", "0"],
        stdout=subprocess.PIPE, stderr=err, preexec_fn=limit, text=True)
    while True:
        line = proc.stdout.readline()
        if not line:
            sys.exit("the server exited:\n" + open(os.path.join(work, "stderr.log")).read()[-2000:])
        if line.startswith("kustos is serving on "):
            return proc, line.split()[-1].replace("https://", "")


def client(work, cn, org):
    pki = os.path.join(work, "data", "pki")
    key, csr, crt, ext = (os.path.join(work, f"{cn}{x}".replace(":", "_")) for x in (".key", ".csr", ".crt", ".ext"))
    with open(ext, "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n")
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)
    run("openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key)
    run("openssl", "req", "-new", "-key", key, "-subj", f"/O={org}/CN={cn}", "-out", csr)
    run("openssl", "x509", "-req", "-in", csr, "-CA", os.path.join(pki, "ca.crt"), "-CAkey",
        os.path.join(pki, "ca.key"), "-CAcreateserial", "-days", "1", "-out", crt, "-extfile", ext)
    ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
    ctx.check_hostname = False
    ctx.load_cert_chain(crt, key)
    return ctx


def stats(pid):
    status = open(f"/proc/{pid}/status").read()
    hwm = int(next(l for l in status.splitlines() if l.startswith("VmHWM")).split()[1]) // 1024
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return hwm, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pod(name, key_len, envs):
    env = [{"name": f"e{i}", "value": "v"} for i in range(envs)]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "annotations": {"kubernetes.io/config.mirror": "x"}},
            "spec": {"nodeName": NODE, "containers": [{"name": "c" * key_len, "image": "busybox", "env": env}]}}


def forged():
    obj = pod("forged", 100_000, 9_000)
    key = "k:" + json.dumps({"name": "c" * 100_000}, separators=(",", ":"))
    owned = {f'k:{{"name":"e{i}"}}': {".": {}, "f:name": {}, "f:value": {}} for i in range(9_000)}
    fields = {"f:spec": {"f:containers": {key: {"f:env": owned}}}}
    obj["metadata"]["managedFields"] = [
        {"manager": f"m{i}", "operation": "Update", "apiVersion": "v1", "time": "2026-01-01T00:00:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": fields} for i in range(3)]
    return obj


def node_apply():
    conditions = [{"type": f"T{i}-" + "t" * 20, "status": "True", "reason": "R", "message": "m"}
                  for i in range(15_000)]
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}, "status": {"conditions": conditions}}


PODS = "/api/v1/namespaces/default/pods"
APPLY = "application/apply-patch+yaml"
CASES = {
    "plain": ("node", "POST", f"{PODS}?dryRun=All", lambda: pod("plain", 100_000, 9_000), "application/json"),
    "forged": ("node", "POST", f"{PODS}?dryRun=All", forged, "application/json"),
    "apply": ("admin", "PATCH", f"{PODS}/applied?fieldManager=m&dryRun=All", lambda: pod("applied", 500_000, 20_000), APPLY),
    "applyshort": ("admin", "PATCH", f"{PODS}/applied?fieldManager=m&dryRun=All", lambda: pod("applied", 1, 40_000), APPLY),
    "nodeapply": ("node", "PATCH", f"/api/v1/nodes/{NODE}?fieldManager=kubelet&dryRun=All", node_apply, APPLY),
}


def main():
    binary = sys.argv[1]
    for name in sys.argv[2].split(",") if len(sys.argv) > 2 else list(CASES):
        measure(binary, name)


def measure(binary, name):
    work = tempfile.mkdtemp(prefix="bench-managed-fields-")
    proc, addr = start(binary, work, int(os.environ.get("BENCH_AS_LIMIT_KB", 6 * 1024 * 1024)))
    host, port = addr.rsplit(":", 1)
    who = {"node": client(work, f"system:node:{NODE}", "system:nodes"), "admin": client(work, "admin", "system:masters")}
    try:
        identity, method, path, make, ctype = CASES[name]
        body = json.dumps(make(), separators=(",", ":")).encode()
        time.sleep(0.5)
        with open(f"/proc/{proc.pid}/clear_refs", "w") as f:
            f.write("5")
        hwm0, cpu0 = stats(proc.pid)
        peak = {"hwm": hwm0, "cpu": cpu0, "done": False}

        def sample():
            while not peak["done"]:
                try:
                    peak["hwm"], peak["cpu"] = stats(proc.pid)
                except (OSError, StopIteration):
                    return
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        conn = http.client.HTTPSConnection(host, int(port), context=who[identity], timeout=600)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": ctype})
            code = conn.getresponse().status
        except (OSError, http.client.HTTPException) as e:
            code = f"no answer ({e})"
        peak["done"] = True
        sampler.join()
        time.sleep(0.5)
        alive = proc.poll() is None
        print(f"{name}: {len(body) / 1e6:.2f} MB -> {code}; server "
              f"{'alive' if alive else f'died (exit {proc.returncode})'}; "
              f"VmHWM {hwm0} -> {peak['hwm']} MiB; CPU {peak['cpu'] - cpu0:.2f} s", flush=True)
        if not alive:
            print("   ", open(os.path.join(work, "stderr.log")).read().splitlines()[-3])
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
