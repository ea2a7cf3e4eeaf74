package session

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Every Go file under wasm/ that imports syscall/js or safejs carries
// `//go:build js && wasm`, so that the native build never sees them.
func TestJSFilesHaveBuildTags(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "*.go"))
	more, _ := filepath.Glob(filepath.Join("..", "*", "*.go"))
	files = append(files, more...)
	checked := 0
	for _, f := range files {
		ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		js := false
		for _, imp := range ast.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			js = js || p == "syscall/js" || p == "github.com/hack-pad/safejs"
		}
		if !js {
			continue
		}
		checked++
		b, _ := os.ReadFile(f)
		if !strings.HasPrefix(string(b), "//go:build js && wasm\n") {
			t.Errorf("%s imports JS but does not start with //go:build js && wasm", f)
		}
	}
	if checked < 3 {
		t.Fatalf("only %d JS files found: the glob is wrong", checked)
	}
}
