// Command crd-compat checks that new CRDs only widen old ones for the objects that exist: every
// object that the API server would have stored under the old CRDs must still validate under the
// new CRDs, the way the API server validates a custom resource (defaults applied, then the
// OpenAPI schema and the x-kubernetes-validations CEL rules, on create and on an update to
// itself), and none of its fields may be pruned by the new schema (a stored field the new schema
// no longer knows would be dropped by the next write). It uses the API server's own validation
// packages of the cluster's Kubernetes version, so no second implementation of the rules.
//
//	crd-compat -old OLD_CRDS.yaml -new NEW_CRDS.yaml OBJECTS.yaml...
//
// Objects of kinds the old CRDs do not define are not considered; objects the old CRDs refuse
// were never stored, and are counted apart. One line per finding on stdout; exit 1 when there is
// one, 2 on unreadable input.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// maxDocument bounds one YAML document read from a file.
const maxDocument = 8 << 20

// version is one served version of a CRD, ready to validate objects as the API server does.
type version struct {
	structural *structuralschema.Structural
	schema     validation.SchemaCreateValidator
	rules      *cel.Validator
}

// gvk names a kind at a version: group/version, Kind.
type gvk struct{ apiVersion, kind string }

func main() {
	oldFile := flag.String("old", "", "the previous release's CRDs (multi-document YAML)")
	newFile := flag.String("new", "", "the new CRDs (multi-document YAML)")
	flag.Parse()
	if *oldFile == "" || *newFile == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: crd-compat -old OLD_CRDS.yaml -new NEW_CRDS.yaml OBJECTS.yaml...")
		os.Exit(2)
	}
	findings, err := run(*oldFile, *newFile, flag.Args(), os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crd-compat:", err)
		os.Exit(2)
	}
	if findings > 0 {
		os.Exit(1)
	}
}

// run checks the objects of objectFiles, writes each finding as a line to out and returns how
// many there were.
func run(oldFile, newFile string, objectFiles []string, out io.Writer) (int, error) {
	oldCRDs, err := loadCRDs(oldFile)
	if err != nil {
		return 0, err
	}
	newCRDs, err := loadCRDs(newFile)
	if err != nil {
		return 0, err
	}
	checked, unstorable, findings := 0, 0, 0
	for _, file := range objectFiles {
		objects, err := loadObjects(file)
		if err != nil {
			return 0, err
		}
		for i, object := range objects {
			key := gvk{fmt.Sprint(object["apiVersion"]), fmt.Sprint(object["kind"])}
			old, known := oldCRDs[key]
			if !known {
				continue
			}
			where := fmt.Sprintf("%s: document %d (%s %s %s)", file, i+1, key.apiVersion, key.kind, name(object))
			oldPruned, refusals := old.check(object)
			if len(refusals) > 0 {
				unstorable++
				fmt.Fprintf(os.Stderr, "%s: refused by the old CRDs too, not a stored object: %s\n", where, refusals[0])
				continue
			}
			checked++
			current, served := newCRDs[key]
			if !served {
				fmt.Fprintf(out, "%s: the new CRDs no longer serve %s %s\n", where, key.apiVersion, key.kind)
				findings++
				continue
			}
			pruned, refusals := current.check(object)
			for path := range pruned {
				if !oldPruned[path] {
					fmt.Fprintf(out, "%s: field %s is no longer in the schema (pruned on the next write)\n", where, path)
					findings++
				}
			}
			for _, refusal := range refusals {
				fmt.Fprintf(out, "%s: %s\n", where, refusal)
				findings++
			}
		}
	}
	fmt.Fprintf(os.Stderr, "crd-compat: %d stored objects checked against %s, %d findings (%d objects the old CRDs refuse too)\n",
		checked, newFile, findings, unstorable)
	if checked == 0 {
		return 0, errors.New("no object of the old CRDs' kinds was found: nothing was checked")
	}
	return findings, nil
}

func name(object map[string]interface{}) string {
	if metadata, ok := object["metadata"].(map[string]interface{}); ok {
		if n, ok := metadata["name"].(string); ok {
			return n
		}
	}
	return "<no name>"
}

// check validates a copy of the object as the API server does on create and on an update to
// itself: the fields its schema prunes (dropped silently when it is stored), and its refusals.
func (v version) check(original map[string]interface{}) (map[string]bool, []string) {
	object := runtime.DeepCopyJSON(original)
	structuraldefaulting.Default(object, v.structural)
	pruned := map[string]bool{}
	for _, path := range structuralpruning.PruneWithOptions(object, v.structural, true,
		structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}) {
		pruned[path] = true
	}
	errs := validation.ValidateCustomResource(nil, object, v.schema)
	if v.rules != nil {
		ctx := context.Background()
		created, _ := v.rules.Validate(ctx, nil, v.structural, object, nil, celconfig.RuntimeCELCostBudget)
		updated, _ := v.rules.Validate(ctx, nil, v.structural, object, object, celconfig.RuntimeCELCostBudget)
		errs = append(append(errs, created...), updated...)
	}
	var refusals []string
	seen := map[string]bool{}
	for _, e := range errs {
		if text := e.Error(); !seen[text] {
			seen[text] = true
			refusals = append(refusals, text)
		}
	}
	sort.Strings(refusals)
	return pruned, refusals
}

// loadCRDs reads the CRDs of a file, each served version by apiVersion and kind.
func loadCRDs(file string) (map[gvk]version, error) {
	docs, err := documents(file)
	if err != nil {
		return nil, err
	}
	versions := map[gvk]version{}
	for _, doc := range docs {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(doc, &crd); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if crd.Kind != "CustomResourceDefinition" {
			continue
		}
		for _, served := range crd.Spec.Versions {
			if !served.Served || served.Schema == nil || served.Schema.OpenAPIV3Schema == nil {
				continue
			}
			v, err := compile(served.Schema.OpenAPIV3Schema)
			if err != nil {
				return nil, fmt.Errorf("%s: %s %s: %w", file, crd.Name, served.Name, err)
			}
			versions[gvk{crd.Spec.Group + "/" + served.Name, crd.Spec.Names.Kind}] = v
		}
	}
	if len(versions) == 0 {
		return nil, fmt.Errorf("%s holds no CustomResourceDefinition with a schema", file)
	}
	return versions, nil
}

func compile(external *apiextensionsv1.JSONSchemaProps) (version, error) {
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(external, internal, nil); err != nil {
		return version{}, err
	}
	structural, err := structuralschema.NewStructural(internal)
	if err != nil {
		return version{}, err
	}
	schema, _, err := validation.NewSchemaValidator(internal)
	if err != nil {
		return version{}, err
	}
	return version{structural, schema, cel.NewValidator(structural, true, celconfig.PerCallLimit)}, nil
}

// loadObjects reads every document of a file that is an object (apiVersion and kind).
func loadObjects(file string) ([]map[string]interface{}, error) {
	docs, err := documents(file)
	if err != nil {
		return nil, err
	}
	var objects []map[string]interface{}
	for i, doc := range docs {
		var value interface{}
		if err := utilyaml.Unmarshal(doc, &value); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i+1, err)
		}
		// A list or a scalar (a fragment of a document) is no object.
		if object, ok := value.(map[string]interface{}); ok {
			if _, ok := object["apiVersion"].(string); ok {
				objects = append(objects, object)
			}
		}
	}
	return objects, nil
}

// documents splits a YAML file into its non-empty documents.
func documents(file string) ([][]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(io.LimitReader(f, 64<<20)))
	var docs [][]byte
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(doc) > maxDocument {
			return nil, fmt.Errorf("%s: a document of %d bytes (at most %d)", file, len(doc), maxDocument)
		}
		if strings.TrimSpace(string(doc)) != "" {
			docs = append(docs, doc)
		}
	}
}
