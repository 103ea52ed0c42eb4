# Sourced by the build scripts: installs protoc (Debian's protobuf-compiler) when the machine
# lacks it, as the etcd client's gRPC code is generated at build time with it.
if ! command -v protoc >/dev/null 2>&1; then
  echo "installing protobuf-compiler (protoc, needed to build the etcd client)"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get install -y -q protobuf-compiler >/dev/null 2>&1 \
    || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q protobuf-compiler >/dev/null; }
fi
