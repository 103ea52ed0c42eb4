#!/usr/bin/env python3
"""Generate apiserver/src/api/protobuf/schema.rs: the field tables of the Kubernetes protobuf
messages kustos decodes, read from upstream's generated.proto files.

Usage: scripts/gen-protobuf-schema.py API_GIT_DIR APIMACHINERY_GIT_DIR > apiserver/src/api/protobuf/schema.rs

API_GIT_DIR / APIMACHINERY_GIT_DIR are git directories of the public kubernetes/api and
kubernetes/apimachinery repositories; the files are read with `git show HEAD:<path>`.

A field's JSON name is taken from the `json:"..."` tag of the Go struct field whose
`protobuf:"...,name=..."` tag names it (the Go files beside each generated.proto): the
protobuf name is derived from the Go field name and differs from the JSON name in places
(`BoundObjectReference.UID` is `uID` in protobuf, `uid` in JSON). Fields without a JSON name
of their own (inline, `-`) keep their protobuf name.
"""
import re
import subprocess
import sys

API_FILES = [f"{g}/v1/generated.proto" for g in
             ["core", "coordination", "certificates", "rbac", "authentication", "authorization", "flowcontrol"]]
MACHINERY_FILES = ["pkg/apis/meta/v1/generated.proto", "pkg/runtime/generated.proto",
                   "pkg/util/intstr/generated.proto", "pkg/api/resource/generated.proto"]
ROOTS = [
    "k8s.io.api.core.v1.ConfigMap", "k8s.io.api.core.v1.Secret", "k8s.io.api.core.v1.Namespace",
    "k8s.io.api.core.v1.ServiceAccount", "k8s.io.api.core.v1.Event",
    "k8s.io.api.coordination.v1.Lease", "k8s.io.api.certificates.v1.CertificateSigningRequest",
    "k8s.io.api.rbac.v1.Role", "k8s.io.api.rbac.v1.ClusterRole", "k8s.io.api.rbac.v1.RoleBinding",
    "k8s.io.api.rbac.v1.ClusterRoleBinding", "k8s.io.api.authentication.v1.TokenRequest",
    "k8s.io.api.authentication.v1.TokenReview", "k8s.io.api.authentication.v1.SelfSubjectReview",
    "k8s.io.api.authorization.v1.SubjectAccessReview", "k8s.io.api.authorization.v1.SelfSubjectAccessReview",
    "k8s.io.api.authorization.v1.LocalSubjectAccessReview", "k8s.io.api.authorization.v1.SelfSubjectRulesReview",
    "k8s.io.api.flowcontrol.v1.FlowSchema", "k8s.io.api.flowcontrol.v1.PriorityLevelConfiguration",
    "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions", "k8s.io.apimachinery.pkg.runtime.Unknown",
]
SCALARS = {"string": "Str", "bytes": "Bytes", "bool": "Bool", "int32": "Int", "int64": "Int",
           "uint32": "Int", "uint64": "Int"}


def show(git_dir, path):
    return subprocess.run(["git", "--git-dir", git_dir, "show", f"HEAD:{path}"],
                          check=True, capture_output=True, text=True).stdout


def ls(git_dir, directory):
    out = subprocess.run(["git", "--git-dir", git_dir, "ls-tree", "--name-only", f"HEAD:{directory}"],
                         check=True, capture_output=True, text=True).stdout
    return [f"{directory}/{n}" for n in out.split()
            if n.endswith(".go") and not n.endswith("_test.go") and not n.startswith(("generated.", "zz_"))]


def json_names(git_dir, proto_path, names):
    """Record (message, protobuf name) -> JSON name from the Go files beside `proto_path`."""
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
    api, machinery = sys.argv[1], sys.argv[2]
    messages, names = {}, {}
    for p in API_FILES:
        parse(show(api, p), messages)
        json_names(api, p, names)
    for p in MACHINERY_FILES:
        parse(show(machinery, p), messages)
        json_names(machinery, p, names)
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
    print("//! Field numbers and JSON names of the Kubernetes protobuf messages kustos decodes.")
    print("//! This file is over 800 lines because it is generated (one table entry per message):")
    print("//! it is regenerated by that script, not edited by hand.")
    print("use super::{Card, Field, Message, Type};\n")
    print("pub(super) static MESSAGES: &[Message] = &[")
    for n in sorted(keep):
        print(f"    Message {{ name: {n!r}, fields: &[".replace("'", '"'))
        for num, fname, (card, t) in sorted(messages[n]):
            ty = f"Type::{SCALARS[t]}" if t in SCALARS else f'Type::Msg("{t}")'
            json = names.get((n, fname), fname)
            print(f'        Field {{ number: {num}, json: "{json}", ty: {ty}, card: Card::{card} }},')
        print("    ] },")
    print("];")


if __name__ == "__main__":
    main()
