// Command controller runs cert-manager's certificate controllers with the self-signed and CA
// issuers: what the e2e tests need to issue and renew certificates, without the ACME, Vault and
// Venafi issuers, the ingress and gateway shims, leader election or the metrics server.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// Each of these registers its controller (or issuer) with controllerpkg in an init function.
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// Workers per controller: cert-manager's default.
const workers = 5

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster (empty: in-cluster)")
	namespace := flag.String("namespace", "", "the only namespace to manage (empty: all)")
	clusterResourceNamespace := flag.String("cluster-resource-namespace", "kube-system",
		"where the Secrets of ClusterIssuers are")
	klog.InitFlags(nil)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, klog.Background(), "cert-manager-controller")
	if err := run(ctx, options(*kubeconfig, *namespace, *clusterResourceNamespace)); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager controller:", err)
		os.Exit(1)
	}
}

// The defaults of cert-manager's controller configuration that these controllers read.
func options(kubeconfig, namespace, clusterResourceNamespace string) controllerpkg.ContextOptions {
	return controllerpkg.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		Namespace:          namespace,
		IssuerOptions:      controllerpkg.IssuerOptions{ClusterResourceNamespace: clusterResourceNamespace},
		CertificateOptions: controllerpkg.CertificateOptions{
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
		SchedulerOptions: controllerpkg.SchedulerOptions{MaxConcurrentChallenges: 60},
	}
}

// Constructs every registered controller, then starts the shared informers they registered
// with, then runs them until ctx ends.
func run(ctx context.Context, opts controllerpkg.ContextOptions) error {
	factory, err := controllerpkg.NewContextFactory(ctx, opts)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(controllerpkg.Known()))
	for name := range controllerpkg.Known() {
		names = append(names, name)
	}
	sort.Strings(names)
	controllers := make(map[string]controllerpkg.Interface, len(names))
	for _, name := range names {
		c, err := controllerpkg.Known()[name](factory)
		if err != nil {
			return fmt.Errorf("constructing %s: %w", name, err)
		}
		controllers[name] = c
	}
	shared, err := factory.Build()
	if err != nil {
		return err
	}
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	klog.InfoS("starting", "controllers", names, "namespace", opts.Namespace)
	var wg sync.WaitGroup
	errs := make(chan error, len(controllers))
	for name, c := range controllers {
		wg.Go(func() {
			if err := c.Run(workers, ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}
