package clip

import (
	"context"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/recipes"
)

func readAll(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	require.NoError(t, filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		out[strings.TrimPrefix(p, dir)] = b
		return err
	}))
	return out
}

// The same seed draws the same files; another seed other images; a second
// run in the same directory keeps what is there; a directory holding
// another set is refused and left as it was.
func TestGenerateIsDeterministic(t *testing.T) {
	ctx := context.Background()
	a, b, c := t.TempDir(), t.TempDir(), t.TempDir()
	cfg := GenerateConfig{Out: a, Kind: "cars", Images: 40, Size: 32, Seed: 7, Workers: 3}
	st, err := Generate(ctx, cfg)
	require.NoError(t, err)
	require.Equal(t, 40, st.Written)
	require.Equal(t, map[string]int{SplitTrain: 34, SplitValid: 2, SplitTest: 4}, st.Counts)
	cfg.Out, cfg.Workers = b, 1
	_, err = Generate(ctx, cfg)
	require.NoError(t, err)
	fa, fb := readAll(t, a), readAll(t, b)
	require.Len(t, fa, 42)
	require.Equal(t, fa, fb, "same seed, same bytes (whatever the workers)")
	cfg.Out, cfg.Seed = c, 8
	_, err = Generate(ctx, cfg)
	require.NoError(t, err)
	require.NotEqual(t, fa["/images/000003.png"], readAll(t, c)["/images/000003.png"])

	cfg.Out, cfg.Seed = a, 7
	st, err = Generate(ctx, cfg)
	require.NoError(t, err)
	require.Equal(t, 0, st.Written)
	require.Equal(t, 40, st.Skipped)
	cfg.Seed = 9
	_, err = Generate(ctx, cfg)
	var de *DataError
	require.ErrorAs(t, err, &de)
	require.True(t, recipes.IsUserError(err))
	require.Equal(t, fa, readAll(t, a), "nothing overwritten")

	for _, bad := range []GenerateConfig{
		{Out: c, Kind: "trucks", Images: 40, Size: 32},
		{Out: c, Kind: "cars", Images: 19, Size: 32},
		{Out: c, Kind: "cars", Images: 40, Size: 8},
	} {
		_, err := Generate(ctx, bad)
		require.Error(t, err)
		require.True(t, recipes.IsUserError(err), err.Error())
	}
}

// Training captions come from the training templates, held-out ones
// (validation and test images) from the held-out templates; every image
// is one of its kind's zero-shot classes.
func TestSplitsAndCaptions(t *testing.T) {
	for _, kind := range []string{"cars", "shapes"} {
		dir := t.TempDir()
		_, err := Generate(context.Background(), GenerateConfig{Out: dir, Kind: kind, Images: 60, Size: 32, Seed: 1})
		require.NoError(t, err)
		set, err := ReadSet(dir)
		require.NoError(t, err)
		require.Len(t, set.Items, 60)
		for _, it := range set.Items {
			templates := set.Kind.Train
			if it.Split != SplitTrain {
				templates = set.Kind.HeldOut
			}
			var ok bool
			for _, tpl := range templates {
				ok = ok || Caption(tpl, it.Attrs) == it.Caption
			}
			require.True(t, ok, "%s caption %q from the %s templates", it.Split, it.Caption, it.Split)
			require.GreaterOrEqual(t, set.Kind.ClassOf(it.Attrs), 0)
		}
	}
	require.Len(t, Cars.Classes(), 96)
	require.Len(t, Shapes.Classes(), 80)
}

// The held-out templates are new sentences of known words: each differs
// from every training template, and each of its words appears in some
// training caption of its kind (so no word's embedding is untrained).
func TestHeldOutTemplatesUseKnownWords(t *testing.T) {
	for _, k := range []Kind{Cars, Shapes} {
		known := map[string]bool{}
		for _, tpl := range k.Train {
			for _, c := range k.Classes() {
				c["size"] = "small"
				for _, w := range strings.Fields(Caption(tpl, c)) {
					known[w] = true
				}
			}
		}
		for _, tpl := range k.HeldOut {
			require.False(t, slices.Contains(k.Train, tpl))
			for _, w := range strings.Fields(tpl) {
				if !strings.HasPrefix(w, "{") {
					require.True(t, known[w], "%s: held-out word %q is in no training caption", k.Name, w)
				}
			}
		}
	}
}

func TestReadSetRefusesBadDirectories(t *testing.T) {
	good := t.TempDir()
	_, err := Generate(context.Background(), GenerateConfig{Out: good, Kind: "cars", Images: 20, Size: 16, Seed: 1})
	require.NoError(t, err)
	manifest, err := os.ReadFile(filepath.Join(good, "manifest.jsonl"))
	require.NoError(t, err)
	lines := strings.SplitAfter(string(manifest), "\n")
	for _, tc := range []struct {
		name     string
		manifest string
		want     string
	}{
		{"not JSON", "{\"file\": \n", "line 1"},
		{"unknown field", `{"file":"images/000000.png","split":"train","caption":"x","attrs":{},"extra":1}` + "\n", "unknown field"},
		{"bad split", strings.Replace(lines[0], `"split":"train"`, `"split":"dev"`, 1), "split"},
		{"missing image", strings.Replace(lines[0], "000000.png", "999999.png", 1), "no such file"},
		{"escaping path", strings.Replace(lines[0], "images/000000.png", "../x.png", 1), "inside the directory"},
		{"no class", strings.Replace(lines[0], `"color":"`, `"color":"x`, 1), "no cars class"},
		{"empty", "", "lists no images"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.CopyFS(dir, os.DirFS(good)))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "manifest.jsonl"), []byte(tc.manifest), 0o644))
			_, err := ReadSet(dir)
			var de *DataError
			require.ErrorAs(t, err, &de)
			require.True(t, recipes.IsUserError(err))
			require.Contains(t, err.Error(), tc.want)
		})
	}
	_, err = ReadSet(filepath.Join(good, "nope"))
	require.ErrorContains(t, err, "torchfit clip data --out")
	require.True(t, recipes.IsUserError(err))
}

// Pixels are CLIP-normalised; a non-square image is centre-cropped and
// resized; a file that is not an image is a data error.
func TestLoadImage(t *testing.T) {
	dir := t.TempDir()
	img := image.NewRGBA(image.Rect(0, 0, 6, 4))
	for y := 0; y < 4; y++ {
		for x := 0; x < 6; x++ {
			c := color.RGBA{255, 0, 0, 255}
			if x == 0 || x == 5 {
				c = color.RGBA{0, 0, 255, 255} // cropped away
			}
			img.SetRGBA(x, y, c)
		}
	}
	path := filepath.Join(dir, "a.png")
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, png.Encode(f, img))
	require.NoError(t, f.Close())
	for _, res := range []int{4, 8, 2} {
		px, err := LoadImage(path, res)
		require.NoError(t, err)
		require.Len(t, px, 3*res*res)
		for i := 0; i < res*res; i++ {
			require.InDelta(t, (1-imageMean[0])/imageStd[0], px[i], 1e-5)
			require.InDelta(t, (0-imageMean[2])/imageStd[2], px[2*res*res+i], 1e-5)
		}
	}
	require.NoError(t, os.WriteFile(path, []byte("not a png"), 0o644))
	_, err = LoadImage(path, 4)
	require.Error(t, err)
}

func TestTokenizer(t *testing.T) {
	words := vocabularyWords()
	tok, err := NewTokenizer(words, 128, 8)
	require.NoError(t, err)
	ids := tok.Encode("A red Sedan facing left")
	require.Equal(t, tok.SOT(), ids[0])
	require.Equal(t, "a red sedan facing left", tok.Decode(ids))
	require.Equal(t, tok.EOT(), ids[6])
	require.Equal(t, []int64{PadID}, ids[7:])
	long := tok.Encode("a photo of a red sports car facing to the left")
	require.Len(t, long, 8)
	require.Equal(t, tok.EOT(), long[7], "a long caption keeps its end token")
	require.Equal(t, "a photo of a red sports", tok.Decode(long))
	for _, id := range long[:7] {
		require.Less(t, id, tok.EOT(), "the end token is the argmax")
	}
	require.Equal(t, int64(UnkID), tok.Encode("zebra")[1])
	_, err = NewTokenizer(words, int64(len(words)+3), 8)
	require.Error(t, err)
	_, err = NewTokenizer([]string{"a", "a"}, 128, 8)
	require.Error(t, err)
}
