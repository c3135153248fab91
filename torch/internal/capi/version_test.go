package capi

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The loaded-library check reads each layout's version; the one loaded
// here agrees with the headers.
func TestLibraryVersionLayouts(t *testing.T) {
	b, err := BuildInfo()
	require.NoError(t, err)
	v, why, err := LibraryVersion(b.Library)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(v, fmt.Sprintf("%d.%d", b.HeaderMajor, b.HeaderMinor)), "loaded %s reads as %q", b.Library, v)
	require.Empty(t, why)

	other := fmt.Sprintf("%d.%d.0", b.HeaderMajor, b.HeaderMinor+7)
	dir := t.TempDir()
	write := func(rel, text string) string {
		p := filepath.Join(dir, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	pip := write("site/torch/lib/libtorch_cpu.so", "")
	write("site/torch/version.py", "__version__ = '"+other+"+cu130'\ngit_version = 'x'\n")
	zip := write("libtorch/lib/libtorch_cpu.so", "")
	write("libtorch/build-version", other+"+cpu\n")
	deb := write("deb/lib/libtorch_cpu.so."+other, "")
	link := filepath.Join(dir, "deb/lib/libtorch_cpu.so")
	require.NoError(t, os.Symlink(deb, link))
	unknown := write("plain/lib/libtorch_cpu.so", "")
	for _, tc := range []struct{ name, path, want string }{
		{"pip torch package", pip, other + "+cu130"},
		{"libtorch zip", zip, other + "+cpu"},
		{"versioned file name behind a link", link, other},
		{"nothing to read", unknown, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, why, err := LibraryVersion(tc.path)
			require.NoError(t, err)
			require.Equal(t, tc.want, v)
			if tc.want == "" {
				require.Empty(t, why)
				return
			}
			require.Contains(t, why, "loaded libtorch "+tc.want)
			require.Contains(t, why, fmt.Sprintf("compiled against libtorch %d.%d headers", b.HeaderMajor, b.HeaderMinor))
		})
	}
}

// A program whose libtorch is not its headers' stops before any libtorch
// call with one line and exit status 2: this test binary run again with a
// directory first on LD_LIBRARY_PATH that holds a libtorch_cpu.so of another
// version (a copy of this one, named as the other version's) never reaches
// its tests.
func TestMismatchedLibraryStopsAtLoad(t *testing.T) {
	if os.Getenv("TF_VERSION_CHILD") == "1" {
		t.Log("reached the tests")
		return
	}
	b, err := BuildInfo()
	require.NoError(t, err)
	// A pip-like tree whose version.py names another version, whose lib/
	// links the real libraries: all of a torch package's (their RUNPATH is
	// $ORIGIN), only libtorch_cpu of a system directory (Debian's).
	dir := t.TempDir()
	lib := filepath.Join(dir, "torch", "lib")
	require.NoError(t, os.MkdirAll(lib, 0o755))
	real := filepath.Dir(b.Library)
	own := fileExists(filepath.Join(filepath.Dir(real), "version.py")) || fileExists(filepath.Join(filepath.Dir(real), "build-version"))
	entries, err := os.ReadDir(real)
	require.NoError(t, err)
	for _, e := range entries {
		if own || strings.HasPrefix(e.Name(), "libtorch_cpu.so") {
			require.NoError(t, os.Symlink(filepath.Join(real, e.Name()), filepath.Join(lib, e.Name())))
		}
	}
	if own { // a pip install's torch finds its CUDA libraries in ../../nvidia
		if nv := filepath.Join(filepath.Dir(filepath.Dir(real)), "nvidia"); fileExists(nv) {
			require.NoError(t, os.Symlink(nv, filepath.Join(dir, "nvidia")))
		}
	}
	other := fmt.Sprintf("%d.%d.0", b.HeaderMajor, b.HeaderMinor+7)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "torch", "version.py"), []byte("__version__ = '"+other+"'\n"), 0o644))
	cmd := exec.Command(os.Args[0], "-test.run", "^TestMismatchedLibraryStopsAtLoad$", "-test.v")
	cmd.Env = append(os.Environ(), "TF_VERSION_CHILD=1", "LD_LIBRARY_PATH="+lib+":"+os.Getenv("LD_LIBRARY_PATH"))
	out, err := cmd.CombinedOutput()
	text := strings.TrimSpace(string(out))
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, text)
	require.Equal(t, 2, ee.ExitCode(), text)
	require.Len(t, strings.Split(text, "\n"), 1, text)
	require.Contains(t, text, "loaded libtorch "+other)
	require.NotContains(t, text, "reached the tests")

	again := exec.Command(os.Args[0], "-test.run", "^TestMismatchedLibraryStopsAtLoad$", "-test.v")
	again.Env = append(cmd.Env, "TORCHFIT_SKIP_VERSION_CHECK=1")
	out, err = again.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "reached the tests")
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
