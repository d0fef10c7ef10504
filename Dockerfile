# syntax=docker/dockerfile:1
# The trainwarden controller image: `docker build -t REGISTRY/trainwarden:TAG .` from the repository root
# (BuildKit, for the cache mounts). The Helm chart (charts/trainwarden) runs it as `trainwarden controller ...`.

# The toolchain the project is developed and tested with; the workspace's MSRV is lower (Cargo.toml).
ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
COPY . .
# The cargo registry and target dir are BuildKit caches, so the binary is copied out in the same step.
# ring (rustls' crypto provider) needs a C compiler, which the rust image has; nothing links OpenSSL.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build -p trainwarden --release --locked \
 && install -D -m 0755 target/release/trainwarden /out/trainwarden

# glibc + libgcc, no shell, UID/GID 65532; bookworm on both sides so the glibc matches.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /out/trainwarden /usr/local/bin/trainwarden
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/trainwarden"]
CMD ["controller"]
