//! Generates the `k8s.io/externaljwt` v1 client and server from `proto/externaljwt/v1/api.proto`
//! (protoc must be on PATH, as for etcd-client's protos).

fn main() {
    let proto = "proto/externaljwt/v1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    if let Err(e) =
        tonic_prost_build::configure().build_client(true).build_server(true).compile_protos(&[proto], &["proto"])
    {
        eprintln!("compiling {proto}: {e}");
        std::process::exit(1);
    }
}
