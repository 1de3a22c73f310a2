// Package deploy holds no code: it is where Sluice is packaged for
// deployment, and its tests prove the packages work without a Docker
// daemon or a cluster.
//
//   - ../Dockerfile: the image. image_test.go assembles its final stage
//     from the Dockerfile's own lines into an OCI image layout (with
//     go-containerregistry), checks the image's config, extracts its layers
//     into an empty root and runs the entrypoint and the health check there.
//   - build.sh, release.sh: the static, version-stamped build that the
//     Dockerfile, the release archives and the tests share.
//   - helm/sluice: the Helm chart. helm_test.go lints and renders it with
//     Helm v3 (as a Go module) for each values example and checks the
//     rendered config, arguments and probes against the real binary.
//   - compose.yaml, prometheus/, grafana/: Sluice with PostgreSQL,
//     Prometheus and a provisioned Grafana dashboard. compose_test.go checks
//     that they agree with each other and that the dashboard only queries
//     metrics the gateway registers.
//
// docs/deploy.md is the operator's guide.
package deploy
