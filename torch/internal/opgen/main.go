package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	list := flag.String("list", "ops.list", "the list of wrappers")
	out := flag.String("out", "ops_gen.go", "the Go file to write")
	pkg := flag.String("pkg", "torch", "the package of the Go file")
	check := flag.Bool("check", false, "only report whether -out is up to date (exit status 1 if not)")
	flag.Parse()
	if err := run(*list, *out, *pkg, *check); err != nil {
		fmt.Fprintln(os.Stderr, "opgen:", err)
		os.Exit(1)
	}
}

func run(list, out, pkg string, check bool) error {
	src, err := os.ReadFile(list)
	if err != nil {
		return err
	}
	code, err := Generate(filepath.Base(list), pkg, src)
	if err != nil {
		return err
	}
	if check {
		old, err := os.ReadFile(out)
		if err != nil {
			return err
		}
		if !bytes.Equal(old, code) {
			return fmt.Errorf("%s is out of date with %s: run go generate", out, list)
		}
		return nil
	}
	old, err := os.ReadFile(out)
	if err == nil && bytes.Equal(old, code) {
		return nil // unchanged: keep the file's time
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, code, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
