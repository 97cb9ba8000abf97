//go:build tools

// Package tools pins the prometheus-operator and prometheus-config-reloader commands so
// `go mod tidy` keeps their dependencies in go.sum. The e2e tests run the operator as a host
// process (the oracle for ShardedPrometheus) and the reloader as a sidecar on the real nodes.
package tools

import (
	_ "github.com/prometheus-operator/prometheus-operator/cmd/operator"
	_ "github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader"
)
