// Builds go-containerregistry's registry for the e2e tests: an OCI registry (in memory) the
// helm suite pushes the chart to and installs it from by oci://, as docs/helm.md tells users.
module zone-aware-controllers/e2e/cluster/tools/registry

go 1.26.0

require github.com/google/go-containerregistry v0.22.1
