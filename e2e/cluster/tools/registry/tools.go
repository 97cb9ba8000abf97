//go:build tools

// Package tools pins the registry command so `go mod tidy` keeps its dependencies in go.sum.
package tools

import (
	_ "github.com/google/go-containerregistry/cmd/registry"
)
