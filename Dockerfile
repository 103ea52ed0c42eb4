# kustos container image: one static-ish binary on a distroless base, running as non-root.
#   docker build -t kustos:0.1.0 .
FROM rust:1.89-bookworm AS build
WORKDIR /src
# The bundled SQLite needs a C compiler, which the image has; the etcd client's gRPC code is
# generated with protoc.
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler \
    && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cargo build --release --locked --bin kustos \
    && install -D -m 0755 target/release/kustos /out/kustos

# glibc and libgcc only; no shell, no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/kustos /usr/local/bin/kustos
USER 65532:65532
# The controller-manager serves /healthz on its metrics port; probes live in the manifests.
HEALTHCHECK NONE
ENTRYPOINT ["/usr/local/bin/kustos"]
CMD ["--help"]
