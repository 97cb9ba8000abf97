//go:build tools

// Package tools pins Prometheus 2.x (module tag v0.55.1 = Prometheus 2.55.1, the last 2.x) for
// the e2e tests of ShardedPrometheus version 2: `go build` of its commands from this module.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
