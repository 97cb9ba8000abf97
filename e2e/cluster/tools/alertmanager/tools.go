//go:build tools

// Package tools pins the alertmanager command so `go mod tidy` keeps its dependencies in go.sum.
// The alerting e2e tests run a real Alertmanager on the real nodes and check what the shards'
// Prometheus pods send it.
package tools

import (
	_ "github.com/prometheus/alertmanager/cmd/alertmanager"
)
