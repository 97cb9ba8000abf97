// Command cainjector runs cert-manager's CA injector: it copies a CA into the caBundle of the
// webhook configurations, APIServices and CRDs annotated cert-manager.io/inject-ca-from(-secret).
// No leader election, metrics or health server.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	"github.com/cert-manager/cert-manager/pkg/util"
	utilfeature "github.com/cert-manager/cert-manager/pkg/util/feature"
)

func main() {
	// --kubeconfig is controller-runtime's own flag (read by ctrl.GetConfig).
	namespace := flag.String("namespace", "", "the only namespace whose Certificates and Secrets are read (empty: all)")
	// E.g. CAInjectorMerging=false: a caBundle replaced by the new CA, as before cert-manager
	// v1.19, instead of the new CA appended to it.
	gates := flag.String("feature-gates", "", "cert-manager's cainjector feature gates, e.g. CAInjectorMerging=false")
	klog.InitFlags(nil)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctrl.SetLogger(klog.Background())
	if err := utilfeature.DefaultMutableFeatureGate.Set(*gates); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager cainjector: --feature-gates:", err)
		os.Exit(2)
	}
	if err := run(ctx, *namespace); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager cainjector:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, namespace string) error {
	config, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	config = util.RestConfigWithUserAgent(config, "cainjector")
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(config, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		// The injectors watch Secrets' metadata only and read a Secret's data when they need it,
		// as cert-manager's own cainjector does: no cache of every Secret's data.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		return err
	}
	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    namespace,
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	})
	if err != nil {
		return err
	}
	klog.InfoS("starting", "namespace", namespace)
	return mgr.Start(ctx)
}
