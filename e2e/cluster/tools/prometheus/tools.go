//go:build tools

// Package tools pins the prometheus and promtool commands so `go mod tidy` keeps their
// dependencies in go.sum. The e2e tests run real Prometheus 3 on every config the shard
// controller renders.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
