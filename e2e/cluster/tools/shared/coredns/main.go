// Command coredns is CoreDNS with the plugins the local zonal cluster's DNS uses, and no
// others: the kubernetes plugin (Services and pods under cluster.local), forward (everything
// else, to the host's resolvers), cache, and the health and readiness endpoints the pod's
// probes read. The full plugin set links every cloud provider's SDK for nothing here.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() {
	// The order the plugins run in is CoreDNS's own (dnsserver.Directives): the same as
	// upstream's builds for the plugins linked here.
	coremain.Run()
}
