# Install on a cluster: images, kustomize manifests, deploy/undeploy, CRD install/uninstall.
# Included from the Makefile.
