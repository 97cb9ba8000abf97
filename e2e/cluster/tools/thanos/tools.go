//go:build tools

// Package tools pins the Thanos command in go.mod.
package tools

import _ "github.com/thanos-io/thanos/cmd/thanos"
