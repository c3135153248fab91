package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/torch"
)

// Every verb with a --device flag, found in the app itself, refuses a CUDA
// device that is not there with one line naming it and exit status 2 —
// never libtorch's dispatcher table. cuda:7 is missing on any machine
// here; plain "cuda" too where CUDA is not available.
func TestEveryVerbRefusesAMissingCUDADevice(t *testing.T) {
	devices := []string{"cuda:7"}
	if !torch.CUDAAvailable() {
		devices = append(devices, "cuda")
	}
	var verbs [][]string
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := append(append([]string{}, path...), c.Name)
			for _, f := range c.Flags {
				if sf, ok := f.(*cli.StringFlag); ok && sf.Name == "device" {
					verbs = append(verbs, p)
				}
			}
			walk(p, c.Subcommands)
		}
	}
	walk(nil, newApp().Commands)
	require.GreaterOrEqual(t, len(verbs), 15, "%v", verbs)
	dir := t.TempDir()
	for _, v := range verbs {
		for _, dev := range devices {
			name := strings.Join(v, " ") + " --device " + dev
			t.Run(name, func(t *testing.T) {
				args := append(append([]string{}, v...), "--device", dev, "--checkpoint", dir+"/none.pt",
					"--data", dir+"/none", "--checkpoint-dir", dir+"/ck")
				args = filterFlags(v, args)
				if name := strings.Join(v, " "); name == "asr transcribe" {
					args = append(args, dir+"/x.wav") // it wants a file before anything else
				}
				code, out := runInProcess(args...)
				require.Equal(t, 2, code, out)
				requireOneLine(t, out, dev)
				require.NotContains(t, out, "Could not run")
			})
		}
	}
}

// filterFlags drops the flags verb v does not define, or hides (those it
// refuses: a memory test's --checkpoint-dir, recipes.Unused).
func filterFlags(v []string, args []string) []string {
	cmd := findCommand(newApp().Commands, v)
	has := map[string]bool{}
	for _, f := range cmd.Flags {
		if vf, ok := f.(cli.VisibleFlag); ok && !vf.IsVisible() {
			continue
		}
		for _, n := range f.Names() {
			has[n] = true
		}
	}
	out := append([]string{}, v...)
	for i := len(v); i < len(args); i += 2 {
		if has[strings.TrimPrefix(args[i], "--")] {
			out = append(out, args[i], args[i+1])
		}
	}
	return out
}

func findCommand(cmds []*cli.Command, path []string) *cli.Command {
	for _, c := range cmds {
		if c.Name == path[0] {
			if len(path) == 1 {
				return c
			}
			return findCommand(c.Subcommands, path[1:])
		}
	}
	return nil
}

func TestDoctor(t *testing.T) {
	r, err := buildDoctor()
	require.NoError(t, err)
	maj, min, _ := torch.LibtorchVersion()
	require.Equal(t, majorMinor(r.Libtorch.HeaderVersion), majorMinor(r.Libtorch.Version))
	require.True(t, strings.HasPrefix(r.Libtorch.Version, fmt.Sprintf("%d.%d.", maj, min)), r.Libtorch.Version)
	require.Equal(t, torch.CUDAAvailable(), r.CUDA.Available)
	var b strings.Builder
	r.print(&b)
	text := b.String()
	require.Contains(t, text, "libtorch      "+r.Libtorch.Version)
	if !r.CUDA.Available {
		require.Contains(t, text, "CUDA          not available: "+r.CUDA.Reason)
	}
	require.Less(t, strings.Count(text, "\n"), 25, "one screen:\n%s", text)
	code, out := runInProcess("doctor", "extra")
	require.Equal(t, 2, code, out)
}
