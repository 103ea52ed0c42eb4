#!/usr/bin/env python3
"""Generate apiserver/src/wire/protobuf/schema.rs: the field tables of the Kubernetes protobuf
messages kustos decodes and encodes, read from upstream's generated.proto files.

Usage: scripts/gen-protobuf-schema.py API_GIT_DIR APIMACHINERY_GIT_DIR APIEXTENSIONS_GIT_DIR \
           > apiserver/src/wire/protobuf/schema.rs && cargo fmt --all

The arguments are git directories of the public kubernetes/api, kubernetes/apimachinery and
kubernetes/apiextensions-apiserver repositories; the files are read with `git show HEAD:<path>`.

The tables hold every message reachable from ROOTS: each kind kustos serves and its list,
the meta.k8s.io messages every group shares (DeleteOptions, Status, WatchEvent,
PartialObjectMetadata[List], List) and the runtime.Unknown envelope. `Table` has no protobuf
form upstream (`+protobuf=false`), so it is not among them.

A field's JSON name is taken from the `json:"..."` tag of the Go struct field whose
`protobuf:"...,name=..."` tag names it (the Go files beside each generated.proto): the
protobuf name is derived from the Go field name and differs from the JSON name in places
(`BoundObjectReference.UID` is `uID` in protobuf, `uid` in JSON). Fields without a JSON name
of their own (inline, `-`) keep their protobuf name. A field whose Go type is a pointer is
marked `opt`: its zero value is meaningful (`automountServiceAccountToken: false`), so the
decoder keeps it where it drops the zero values of plain fields (Go's `omitempty`).
"""
import re
import subprocess
import sys

API_FILES = [f"{g}/v1/generated.proto" for g in
             ["core", "coordination", "certificates", "rbac", "authentication", "authorization", "flowcontrol",
              "events", "storage", "node"]] + ["certificates/v1beta1/generated.proto"]
MACHINERY_FILES = ["pkg/apis/meta/v1/generated.proto", "pkg/apis/meta/v1beta1/generated.proto",
                   "pkg/runtime/generated.proto", "pkg/util/intstr/generated.proto",
                   "pkg/api/resource/generated.proto"]
APIEXTENSIONS_FILES = ["pkg/apis/apiextensions/v1/generated.proto"]
# Served kinds: each with its list.
KINDS = [
    "k8s.io.api.core.v1.ConfigMap", "k8s.io.api.core.v1.Secret", "k8s.io.api.core.v1.Namespace",
    "k8s.io.api.core.v1.ServiceAccount", "k8s.io.api.core.v1.Event", "k8s.io.api.events.v1.Event",
    "k8s.io.api.core.v1.Node",
    "k8s.io.api.core.v1.Pod", "k8s.io.api.core.v1.Service",
    "k8s.io.api.storage.v1.CSINode", "k8s.io.api.storage.v1.CSIDriver", "k8s.io.api.node.v1.RuntimeClass",
    "k8s.io.api.coordination.v1.Lease", "k8s.io.api.certificates.v1.CertificateSigningRequest",
    "k8s.io.api.certificates.v1.ClusterTrustBundle", "k8s.io.api.certificates.v1beta1.ClusterTrustBundle",
    "k8s.io.api.certificates.v1.PodCertificateRequest", "k8s.io.api.certificates.v1beta1.PodCertificateRequest",
    "k8s.io.api.rbac.v1.Role", "k8s.io.api.rbac.v1.ClusterRole", "k8s.io.api.rbac.v1.RoleBinding",
    "k8s.io.api.rbac.v1.ClusterRoleBinding",
    "k8s.io.api.flowcontrol.v1.FlowSchema", "k8s.io.api.flowcontrol.v1.PriorityLevelConfiguration",
    "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
]
ROOTS = KINDS + [k + "List" for k in KINDS] + [
    "k8s.io.api.authentication.v1.TokenRequest",
    "k8s.io.api.authentication.v1.TokenReview", "k8s.io.api.authentication.v1.SelfSubjectReview",
    "k8s.io.api.authorization.v1.SubjectAccessReview", "k8s.io.api.authorization.v1.SelfSubjectAccessReview",
    "k8s.io.api.authorization.v1.LocalSubjectAccessReview", "k8s.io.api.authorization.v1.SelfSubjectRulesReview",
] + [f"k8s.io.apimachinery.pkg.apis.meta.v1.{m}" for m in [
    "DeleteOptions", "Status", "StatusDetails", "StatusCause", "WatchEvent", "List",
    "PartialObjectMetadata", "PartialObjectMetadataList",
]] + [
    "k8s.io.apimachinery.pkg.apis.meta.v1beta1.PartialObjectMetadataList",
    "k8s.io.apimachinery.pkg.runtime.Unknown",
]
SCALARS = {"string": "Str", "bytes": "Bytes", "bool": "Bool", "int32": "Int", "int64": "Int",
           "uint32": "Int", "uint64": "Int", "double": "Double"}


def show(git_dir, path):
    return subprocess.run(["git", "--git-dir", git_dir, "show", f"HEAD:{path}"],
                          check=True, capture_output=True, text=True).stdout


def ls(git_dir, directory):
    out = subprocess.run(["git", "--git-dir", git_dir, "ls-tree", "--name-only", f"HEAD:{directory}"],
                         check=True, capture_output=True, text=True).stdout
    return [f"{directory}/{n}" for n in out.split()
            if n.endswith(".go") and not n.endswith("_test.go") and not n.startswith(("generated.", "zz_"))]


def json_names(git_dir, proto_path, names, pointers):
    """Record (message, protobuf name) -> JSON name from the Go files beside `proto_path`, and
    the (message, protobuf name) pairs whose Go field is a pointer."""
    pkg = re.search(r"^package\s+([\w.]+);", show(git_dir, proto_path), re.M).group(1)
    for path in ls(git_dir, proto_path.rsplit("/", 1)[0]):
        struct = None
        for line in show(git_dir, path).splitlines():
            start = re.match(r"type\s+(\w+)\s+struct\s*\{\s*$", line)
            if start:
                struct = start.group(1)
            elif line.startswith("}"):
                struct = None
            elif struct and not line.lstrip().startswith("//"):
                tag = re.search(r"`([^`]*)`", line)
                proto = tag and re.search(r'protobuf:"[^"]*?\bname=(\w+)', tag.group(1))
                js = tag and re.search(r'json:"([^",]*)', tag.group(1))
                if proto and js and js.group(1) not in ("", "-"):
                    names[(f"{pkg}.{struct}", proto.group(1))] = js.group(1)
                go_type = re.match(r"\s*\w+\s+(\S+)\s+`", line)
                if proto and go_type and go_type.group(1).startswith("*"):
                    pointers.add((f"{pkg}.{struct}", proto.group(1)))


def parse(text, messages):
    pkg = re.search(r"^package\s+([\w.]+);", text, re.M).group(1)
    body = re.sub(r"//[^\n]*", "", text)
    for m in re.finditer(r"\bmessage\s+(\w+)\s*\{([^{}]*)\}", body):
        name = f"{pkg}.{m.group(1)}"
        fields = []
        for f in re.finditer(r"(optional|repeated)?\s*(map<\s*(\w+)\s*,\s*([\w.]+)\s*>|[\w.]+)\s+(\w+)\s*=\s*(\d+)\s*;", m.group(2)):
            label, typ, mk, mv, fname, num = f.groups()
            if mk:
                kind = ("Map", resolve(mv, pkg))
            else:
                kind = ("Repeated" if label == "repeated" else "One", resolve(typ, pkg))
            fields.append((int(num), fname, kind))
        messages[name] = fields


def resolve(typ, pkg):
    if typ in SCALARS:
        return typ
    if typ.startswith("."):
        return typ[1:]
    return f"{pkg}.{typ}"


def main():
    api, machinery, apiextensions = sys.argv[1], sys.argv[2], sys.argv[3]
    messages, names, pointers = {}, {}, set()
    for git_dir, files in [(api, API_FILES), (machinery, MACHINERY_FILES), (apiextensions, APIEXTENSIONS_FILES)]:
        for p in files:
            parse(show(git_dir, p), messages)
            json_names(git_dir, p, names, pointers)
    missing = [r for r in ROOTS if r not in messages]
    if missing:
        sys.exit(f"no message for {missing}")
    keep, todo = set(), list(ROOTS)
    while todo:
        n = todo.pop()
        if n in keep or n not in messages:
            continue
        keep.add(n)
        for _, _, (_, t) in messages[n]:
            if t not in SCALARS:
                todo.append(t)
    print("// @generated by scripts/gen-protobuf-schema.py from upstream's generated.proto files.")
    print("//! Field numbers and JSON names of the Kubernetes protobuf messages kustos decodes and encodes.")
    print("//! This file is over 800 lines because it is generated (one table entry per message):")
    print("//! it is regenerated by that script, not edited by hand.")
    print("use super::{Card, Field, Message, Type};\n")
    print("pub(super) static MESSAGES: &[Message] = &[")
    for n in sorted(keep):
        print(f"    Message {{ name: {n!r}, fields: &[".replace("'", '"'))
        for num, fname, (card, t) in sorted(messages[n]):
            ty = f"Type::{SCALARS[t]}" if t in SCALARS else f'Type::Msg("{t}")'
            json = names.get((n, fname), fname)
            opt = "true" if (n, fname) in pointers else "false"
            print(f'        Field {{ number: {num}, json: "{json}", ty: {ty}, card: Card::{card}, opt: {opt} }},')
        print("    ] },")
    print("];")


if __name__ == "__main__":
    main()
