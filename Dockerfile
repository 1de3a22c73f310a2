# syntax=docker/dockerfile:1
#
# The Sluice gateway image: one static binary FROM scratch, running as a
# non-root user, `sluice serve` with the config at $SLUICE_CONFIG and the
# SQLite store in the /var/lib/sluice volume. docs/deploy.md.
#
#   docker build -t sluice .                     (or: make image)
#   docker run -p 8080:8080 -e ANTHROPIC_API_KEY -e SLUICE_KEY -v sluice-data:/var/lib/sluice sluice
#
# deploy/image_test.go assembles this image's final stage from these lines
# (without Docker), checks its config and runs its entrypoint and health
# check: keep every instruction of the final stage one it understands.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
COPY . .
# Stamped into `sluice --version`; deploy/build.sh reads them. Pass them,
# since the build context has no .git: make image does.
ARG TARGETOS TARGETARCH VERSION COMMIT DATE
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH VERSION=$VERSION COMMIT=$COMMIT DATE=$DATE deploy/build.sh /out/sluice
RUN mkdir -p /out/data

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/sluice /usr/local/bin/sluice
COPY deploy/docker/sluice.yaml /etc/sluice/sluice.yaml
COPY --from=build --chown=65532:65532 /out/data /var/lib/sluice
ENV SLUICE_CONFIG=/etc/sluice/sluice.yaml
USER 65532:65532
WORKDIR /var/lib/sluice
VOLUME ["/var/lib/sluice"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 CMD ["/usr/local/bin/sluice", "health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/sluice", "serve"]
