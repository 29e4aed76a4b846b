package gatewaycli

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A misspelt folder in hooks.dirs loaded nothing and nothing said so: check passed and run
// served without the hooks. check now warns (exit 0), naming the key and the path; the
// default folder, absent until the admin makes it, and a folder that exists are not named.
func TestCheckWarnsOfAHooksDirThatDoesNotExist(t *testing.T) {
	code, out := checkIn(t, "state_dir: ./data\nhooks: {dirs: [./data/hooks, ./data/hook]}\n", nil)
	const want = "hooks.dirs[1]: ./data/hook does not exist, so no hooks load from it"
	if code != 0 || !strings.Contains(out, "\nwarnings:\n  - "+want+"\n") || !strings.Contains(out, "\nconfig OK") {
		t.Errorf("check: exit %d; want 0, the warning %q and config OK:\n%s", code, want, out)
	}
	if strings.Contains(out, "hooks.dirs[0]") {
		t.Errorf("check warns of the default folder:\n%s", out)
	}
	checkIn(t, "state_dir: ./data\nhooks: {dirs: [./mine]}\n", nil) // a new folder, this config
	if err := os.Mkdir("mine", 0o755); err != nil {
		t.Fatal(err)
	}
	code, out = cli(t, t.Context(), nil, "check", "--config", "gateway.yaml")
	if code != 0 || strings.Contains(out, "warnings:") {
		t.Errorf("check with the folder made: exit %d; want 0 and no warning:\n%s", code, out)
	}
}

// The CLI gets its environment passed in (Run's environ; tests and the benchmark give their
// own): a part that read the process's own instead would see another environment than the
// rest of the config. Only cmd/gateway's main reads it.
func TestCLIReadsNoProcessEnvironment(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "os" {
				switch sel.Sel.Name {
				case "Getenv", "LookupEnv", "Environ", "ExpandEnv":
					t.Errorf("%s: os.%s reads the process's environment, not the one the CLI was given", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
}
