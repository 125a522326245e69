# syntax=docker/dockerfile:1
#
# Image of the confighistory webhook server: one static (musl) binary on a
# distroless base with no shell and no package manager, running as uid 65532.
#
#   docker build -t confighistory:dev .
#   docker buildx build --platform linux/amd64,linux/arm64 -t REGISTRY/confighistory:TAG --push .
#
# The chart runs it as `confighistory serve` with a read-only root filesystem;
# the server needs no writable path. In the default TLS mode nothing is mounted
# (the server reads and writes its certificates' Secret through the API); the
# other TLS modes mount the serving certificate's Secret, and clientAuth the
# client CA bundle (a ConfigMap or a Secret).

# Same toolchain as development; Cargo.lock pins every dependency (--locked).
ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-alpine AS build
# musl-dev: the C runtime to link statically against; ring builds C with gcc.
RUN apk add --no-cache musl-dev gcc
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
# Link statically even where the target's default would not.
ENV RUSTFLAGS="-C target-feature=+crt-static"
# Cache mounts keep the crate registry and build directory between builds;
# the binary is copied out of the cache in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin confighistory \
 && install -D -m 0755 target/release/confighistory /out/confighistory

# distroless/static has CA certificates, tzdata and a `nonroot` user, and no
# libc: a binary that is not fully static fails the check below.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/confighistory /usr/local/bin/confighistory
COPY LICENSE /usr/share/doc/confighistory/LICENSE
USER 65532:65532
RUN ["/usr/local/bin/confighistory", "--help"]
# 8443: admission webhooks (HTTPS); 8080: /livez, /readyz, /metrics (HTTP).
EXPOSE 8443 8080
ENTRYPOINT ["/usr/local/bin/confighistory"]
CMD ["serve"]
LABEL org.opencontainers.image.title="confighistory" \
      org.opencontainers.image.description="Admission webhook that gives Kubernetes ConfigMaps a rollout history" \
      org.opencontainers.image.licenses="Apache-2.0"
