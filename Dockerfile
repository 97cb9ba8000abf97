# syntax=docker/dockerfile:1
# One image with every controller binary; each Deployment picks its entrypoint with `command:`.
# Binaries are linked statically (glibc target with +crt-static: no musl toolchain needed) so the
# runtime image is distroless/static: no shell, no libc, non-root (uid 65532).
#
#   make docker-build IMG=registry.example.com/zone-aware-controllers:v0.1.0

FROM docker.io/library/rust:1.95-bookworm AS build
ARG TARGET=x86_64-unknown-linux-gnu
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --target "$TARGET" -p zau-controller -p zdb-controller \
    && mkdir /out \
    && cp "target/$TARGET/release/zau-controller" "target/$TARGET/release/zdb-controller" /out/

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/zau-controller /out/zdb-controller /
USER 65532:65532
ENTRYPOINT ["/zau-controller"]
