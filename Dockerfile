# syntax=docker/dockerfile:1
# One image with every controller binary (the names listed in bins.txt) and the kubectl plugins
# (plugins.txt: the chart's `helm test` runs `kubectl-zone check`); each Deployment picks its
# entrypoint with `command:`. Binaries are linked statically (glibc target with +crt-static: no
# musl toolchain needed) so the runtime image is distroless/static: no shell, no libc, non-root
# (uid 65532).
#
#   make docker-build IMG=registry.example.com/zone-aware-controllers:v0.1.0

FROM docker.io/library/rust:1.95-bookworm AS build
ARG TARGET=x86_64-unknown-linux-gnu
# The git commit the binaries report as <binary>_build_info{revision} (`make docker-build` gives it).
ARG ZONE_AWARE_REVISION=unknown
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --target "$TARGET" $(cat bins.txt plugins.txt | sed 's/^/-p /') \
    && mkdir /out \
    && for bin in $(cat bins.txt plugins.txt); do cp "target/$TARGET/release/$bin" /out/ || exit 1; done

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /
USER 65532:65532
# Without a `command:`, the image runs the first binary of bins.txt (as `make image` does).
ENTRYPOINT ["/zau-controller"]
