// Package layers holds one test: imports point only down the package list of
// docs/architecture.md, so a newcomer can change a part without reading those above it.
package layers

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// order is the package list, top to bottom; a package may import only those after it
// (and its own sub-packages). Fakes (*test packages) are test code and may import anything
// they fake.
var order = []string{"cmd", "gateway", "cluster", "state", "profiles", "builtins", "harness", "hooks", "channels", "internal"}

func rank(pkg string) int {
	top, _, _ := strings.Cut(pkg, "/")
	for i, name := range order {
		if top == name {
			return i
		}
	}
	return -1
}

func TestImportsPointDown(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); strings.HasPrefix(name, ".") || name == "data" || name == "examples" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		if strings.HasSuffix(pkg, "test") { // a fake: test code
			return nil
		}
		from := rank(pkg)
		if from < 0 {
			t.Errorf("%s: package %s is not in the layer list", path, pkg)
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			target, _ := strconv.Unquote(imp.Path.Value)
			dep, ok := strings.CutPrefix(target, "gateway/")
			if !ok {
				continue
			}
			checked++
			if strings.HasSuffix(dep, "test") && !strings.HasPrefix(pkg, "cmd/gateway-bench") {
				t.Errorf("%s imports the fake %s: product code links no fake", path, target)
				continue
			}
			to := rank(dep)
			same := strings.SplitN(dep, "/", 2)[0] == strings.SplitN(pkg, "/", 2)[0]
			if to < 0 || (to <= from && !same) {
				t.Errorf("%s (%s) imports %s, which is not below it in %v", path, pkg, target, order)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("only %d imports checked: the walk did not find the module", checked)
	}
}
