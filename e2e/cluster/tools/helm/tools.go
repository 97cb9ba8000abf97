//go:build tools

// Package tools pins the helm command so `go mod tidy` keeps its dependencies in go.sum. The helm
// e2e test (e2e/tests/helm.rs) and `make chart-check` run it.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
