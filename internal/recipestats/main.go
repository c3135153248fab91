// Command recipestats prints the figures of the recipe layer's shape:
// the longest functions of the given package folders (lines from func to
// its closing brace) and each folder's exported top-level names (funcs,
// types, vars, consts; methods and fields not counted). NAMES=1 lists the
// names.
//
//	go run ./internal/recipestats recipes/asr recipes/clip recipes/ganvit recipes/mamba recipes/tts
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	type fn struct {
		name string
		n    int
	}
	var fns []fn
	exported := map[string]int{}
	for _, dir := range os.Args[1:] {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		fs := token.NewFileSet()
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(fs, f, nil, 0)
			if err != nil {
				panic(err)
			}
			for _, d := range af.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					n := fs.Position(d.End()).Line - fs.Position(d.Pos()).Line + 1
					fns = append(fns, fn{filepath.Base(dir) + "." + d.Name.Name, n})
					if d.Name.IsExported() && d.Recv == nil {
						exported[dir]++
						if os.Getenv("NAMES") != "" {
							fmt.Println("NAME", filepath.Base(dir), d.Name.Name, filepath.Base(f))
						}
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							if s.Name.IsExported() {
								exported[dir]++
								if os.Getenv("NAMES") != "" {
									fmt.Println("NAME", filepath.Base(dir), s.Name.Name, filepath.Base(f))
								}
							}

						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() {
									exported[dir]++
									if os.Getenv("NAMES") != "" {
										fmt.Println("NAME", filepath.Base(dir), n.Name, filepath.Base(f))
									}
								}
							}
						}
					}
				}
			}
		}
	}
	sort.Slice(fns, func(i, j int) bool { return fns[i].n > fns[j].n })
	for _, f := range fns[:12] {
		fmt.Printf("%4d %s\n", f.n, f.name)
	}
	for _, d := range os.Args[1:] {
		fmt.Printf("exported %s: %d\n", d, exported[d])
	}
}
