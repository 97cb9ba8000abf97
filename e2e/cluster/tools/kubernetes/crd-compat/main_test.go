package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// The repository's root, from this package's directory (go test runs in it).
const root = "../../../../.."

// snapshots are the released versions' snapshots (mk/compat-snapshot.py).
func snapshots(t *testing.T) []string {
	dirs, err := filepath.Glob(filepath.Join(root, "crates/api/tests/compat/*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no release snapshot under crates/api/tests/compat (%v)", err)
	}
	return dirs
}

func objectFiles(t *testing.T, dir string) []string {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".yaml") && filepath.Base(path) != "crds.yaml" {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

// treeCRDs are config/crd's CRDs, decoded.
func treeCRDs(t *testing.T) []apiextensionsv1.CustomResourceDefinition {
	files, _ := filepath.Glob(filepath.Join(root, "config/crd/zonecontrol.k8s.aws_*.yaml"))
	if len(files) != 3 {
		t.Fatalf("config/crd holds %d CRDs, not 3", len(files))
	}
	var crds []apiextensionsv1.CustomResourceDefinition
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(text, &crd); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		crds = append(crds, crd)
	}
	return crds
}

func write(t *testing.T, crds []apiextensionsv1.CustomResourceDefinition) string {
	var all []byte
	for _, crd := range crds {
		text, err := yaml.Marshal(crd)
		if err != nil {
			t.Fatal(err)
		}
		all = append(append(all, text...), []byte("\n---\n")...)
	}
	file := filepath.Join(t.TempDir(), "crds.yaml")
	if err := os.WriteFile(file, all, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func check(t *testing.T, newCRDs string) (int, string) {
	var out bytes.Buffer
	total := 0
	for _, dir := range snapshots(t) {
		findings, err := run(filepath.Join(dir, "crds.yaml"), newCRDs, objectFiles(t, dir), &out)
		if err != nil {
			t.Fatal(err)
		}
		total += findings
	}
	return total, out.String()
}

// edit changes the schema of kind's v1 at a path of property names.
func edit(t *testing.T, crds []apiextensionsv1.CustomResourceDefinition, kind string, path []string,
	change func(*apiextensionsv1.JSONSchemaProps)) {
	for i := range crds {
		if crds[i].Spec.Names.Kind != kind {
			continue
		}
		for j := range crds[i].Spec.Versions {
			if crds[i].Spec.Versions[j].Name == "v1" {
				editAt(t, crds[i].Spec.Versions[j].Schema.OpenAPIV3Schema, path, change)
				return
			}
		}
	}
	t.Fatalf("no %s v1 in config/crd", kind)
}

func editAt(t *testing.T, schema *apiextensionsv1.JSONSchemaProps, path []string,
	change func(*apiextensionsv1.JSONSchemaProps)) {
	if len(path) == 0 {
		change(schema)
		return
	}
	child, ok := schema.Properties[path[0]]
	if !ok {
		t.Fatalf("no property %s", path[0])
	}
	editAt(t, &child, path[1:], change)
	schema.Properties[path[0]] = child
}

// The tree's CRDs keep every released object valid.
func TestTheTreeOnlyWidens(t *testing.T) {
	file := write(t, treeCRDs(t))
	if findings, out := check(t, file); findings != 0 {
		t.Fatalf("%d findings:\n%s", findings, out)
	}
}

// The check finds each way a schema narrows for a stored object.
func TestNarrowingIsFound(t *testing.T) {
	cases := []struct {
		name   string
		kind   string
		path   []string
		change func(*apiextensionsv1.JSONSchemaProps)
		want   string
	}{
		{"a field made required", "ZoneAwareUpdate", []string{"spec"},
			func(s *apiextensionsv1.JSONSchemaProps) { s.Required = append(s.Required, "paused") },
			"spec.paused: Required value"},
		{"an enum narrowed", "ShardedPrometheus", []string{"spec", "shardingStrategy", "mode"},
			func(s *apiextensionsv1.JSONSchemaProps) {
				var kept []apiextensionsv1.JSON
				for _, value := range s.Enum {
					if string(value.Raw) != `"Topology"` {
						kept = append(kept, value)
					}
				}
				if len(kept) == len(s.Enum) {
					t.Fatalf("Topology is not in the enum %v", s.Enum)
				}
				s.Enum = kept
			},
			`spec.shardingStrategy.mode: Unsupported value: "Topology"`},
		{"a field removed", "ZoneAwareUpdate", []string{"spec"},
			func(s *apiextensionsv1.JSONSchemaProps) { delete(s.Properties, "exponentialFactor") },
			"field spec.exponentialFactor is no longer in the schema"},
		{"a CEL rule added", "ZoneDisruptionBudget", []string{"spec"},
			func(s *apiextensionsv1.JSONSchemaProps) {
				s.XValidations = append(s.XValidations, apiextensionsv1.ValidationRule{
					Rule: "!has(self.selector)", Message: "no selector"})
			},
			"no selector"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			crds := treeCRDs(t)
			edit(t, crds, c.kind, c.path, c.change)
			findings, out := check(t, write(t, crds))
			if findings == 0 || !strings.Contains(out, c.want) {
				t.Fatalf("%d findings, none saying %q:\n%s", findings, c.want, out)
			}
			t.Logf("%d findings, e.g. %s", findings, strings.SplitN(out, "\n", 2)[0])
		})
	}
}

// The objects the tree shows its users (documented examples, samples, the goldens' inputs) are
// accepted by its own CRDs: an example the API server refuses is the first thing a user meets.
func TestTheTreesExamplesAreAccepted(t *testing.T) {
	crds := write(t, treeCRDs(t))
	versions, err := loadCRDs(crds)
	if err != nil {
		t.Fatal(err)
	}
	files := examples(t)
	checked := 0
	for _, file := range files {
		objects, err := loadObjects(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, object := range objects {
			v, known := versions[gvk{fmt.Sprint(object["apiVersion"]), fmt.Sprint(object["kind"])}]
			if !known {
				continue
			}
			checked++
			if _, refusals := v.check(object); len(refusals) > 0 {
				t.Errorf("%s: document %d (%s): %s", file, i+1, name(object), strings.Join(refusals, "; "))
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d objects found in %d files", checked, len(files))
	}
	t.Logf("%d objects of %d files accepted", checked, len(files))
}

// examples are the YAML files of the samples and the goldens' inputs, and one file per Markdown
// document holding its YAML blocks.
func examples(t *testing.T) []string {
	var files []string
	for _, pattern := range []string{"config/samples/*.yaml", "bins/shard-controller/fixtures/*.yaml"} {
		found, _ := filepath.Glob(filepath.Join(root, pattern))
		files = append(files, found...)
	}
	docs, _ := filepath.Glob(filepath.Join(root, "docs/*.md"))
	fence := regexp.MustCompile("(?ms)^```ya?ml\\s*\\n(.*?)^```")
	for _, doc := range append(docs, filepath.Join(root, "README.md")) {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		var blocks []string
		for _, match := range fence.FindAllStringSubmatch(string(text), -1) {
			blocks = append(blocks, match[1])
		}
		file := filepath.Join(t.TempDir(), filepath.Base(doc)+".yaml")
		if err := os.WriteFile(file, []byte(strings.Join(blocks, "\n---\n")), 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, file)
	}
	return files
}
