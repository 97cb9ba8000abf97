//go:build tools

// Package tools pins the metrics-server command so `go mod tidy` keeps its dependencies in
// go.sum. The e2e tests run it on the real nodes behind the aggregation layer, so that a real
// HorizontalPodAutoscaler scales ShardedPrometheus shards on CPU.
package tools

import (
	_ "sigs.k8s.io/metrics-server/cmd/metrics-server"
)
