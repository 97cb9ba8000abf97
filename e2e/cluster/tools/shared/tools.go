//go:build tools

// Package tools pins the commands built from this module (e2e/cluster/build.sh) so that `go mod
// tidy` keeps their dependencies; the mains of ours (coredns, etcd, cert-manager's controller and
// cainjector) are packages of the module itself.
package tools

import (
	_ "github.com/google/go-jsonnet/cmd/jsonnet"
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
	_ "helm.sh/helm/v3/cmd/helm"
	_ "sigs.k8s.io/kwok/cmd/kwok"
	_ "sigs.k8s.io/metrics-server/cmd/metrics-server"
)
