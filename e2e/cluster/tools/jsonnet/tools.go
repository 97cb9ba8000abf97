//go:build tools

// Package tools pins the jsonnet command so `go mod tidy` keeps its dependencies in go.sum. It
// renders the monitoring mixin (monitoring/): alerts, recording rules and dashboards.
package tools

import _ "github.com/google/go-jsonnet/cmd/jsonnet"
