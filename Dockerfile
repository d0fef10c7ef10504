# The trainwarden controller image: `docker build -t REGISTRY/trainwarden:TAG .` from the repository root.
# The Helm chart (charts/trainwarden) runs it as `trainwarden controller ...`.
#
# Works with the legacy builder and with BuildKit (no `# syntax=` line, no `RUN --mount`). Dependencies are
# compiled in their own layer, which stays cached while only the project's sources change: the `planner` stage
# keeps the Cargo manifests and a stub of each target's root file (what cargo needs to see the targets), so its
# output changes only when manifests, Cargo.lock or the set of targets change, not when a module is added or
# moved (the cargo-chef technique, without the tool).
#
# Both base images are build arguments whose defaults are the public ones. A machine without a registry can
# point them at local images (tests/k8s/build-images.sh does: a debootstrap Debian bookworm with the host's Rust
# toolchain as the builder, and the same Debian as the runtime).

# The toolchain the project is developed and tested with; the workspace's MSRV is lower (Cargo.toml).
ARG BUILDER_IMAGE=docker.io/library/rust:1.95-bookworm
# glibc + libgcc, no shell, UID/GID 65532; bookworm on both sides so the glibc matches.
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${BUILDER_IMAGE} AS planner
WORKDIR /src
COPY . .
# /skeleton: every Cargo.toml and Cargo.lock as is; each target root (src/lib.rs, src/main.rs, src/bin/*,
# tests/*.rs, benches/*.rs, examples/*.rs, build.rs) empty, or `fn main() {}` where it has a main.
RUN find . -path ./target -prune -o -type f \( -name Cargo.toml -o -name Cargo.lock -o -name build.rs \
        -o -regex '.*/src/\(lib\|main\)\.rs' -o -regex '.*/src/bin/[^/]*\.rs' -o -regex '.*/src/bin/[^/]*/main\.rs' \
        -o -regex '.*/\(tests\|benches\|examples\)/[^/]*\.rs' \) -print \
  | while read -r f; do \
      mkdir -p "/skeleton/$(dirname "$f")"; \
      case "$f" in \
        *.rs) if grep -q 'fn main' "$f"; then echo 'fn main() {}'; fi >"/skeleton/$f" ;; \
        *) cp "$f" "/skeleton/$f" ;; \
      esac; \
    done

FROM ${BUILDER_IMAGE} AS builder
WORKDIR /src
# ring (rustls' crypto provider) needs a C compiler, which the rust image has; nothing links OpenSSL.
COPY --from=planner /skeleton/ ./
RUN cargo build -p trainwarden --release --locked
COPY . .
# The copied sources may be older than the stub build: touch them so cargo rebuilds the workspace crates.
RUN find . -path ./target -prune -o -name '*.rs' -type f -exec touch {} + \
 && cargo build -p trainwarden --release --locked \
 && install -D -m 0755 target/release/trainwarden /out/trainwarden

FROM ${RUNTIME_IMAGE}
COPY --from=builder /out/trainwarden /usr/local/bin/trainwarden
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/trainwarden"]
CMD ["controller"]
