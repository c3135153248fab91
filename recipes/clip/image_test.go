package clip

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/recipes"
)

// claimSize encodes a 4×4 image as PNG or JPEG and rewrites its header to
// claim w × h pixels (the PNG's IHDR with its CRC, the JPEG's SOF0): a
// decoder that trusts the header allocates w·h pixels.
func claimSize(t *testing.T, format string, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	var buf bytes.Buffer
	switch format {
	case "png":
		require.NoError(t, png.Encode(&buf, img))
		b := buf.Bytes()
		// signature (8), IHDR length (4), "IHDR" (4), width, height, …, CRC of type+data.
		require.Equal(t, "IHDR", string(b[12:16]))
		binary.BigEndian.PutUint32(b[16:], uint32(w))
		binary.BigEndian.PutUint32(b[20:], uint32(h))
		binary.BigEndian.PutUint32(b[29:], crc32.ChecksumIEEE(b[12:29]))
		return b
	case "jpeg":
		require.NoError(t, jpeg.Encode(&buf, img, nil))
		b := buf.Bytes()
		i := bytes.Index(b, []byte{0xff, 0xc0}) // SOF0: length (2), precision (1), height (2), width (2)
		require.Positive(t, i)
		binary.BigEndian.PutUint16(b[i+5:], uint16(h))
		binary.BigEndian.PutUint16(b[i+7:], uint16(w))
		return b
	}
	t.Fatalf("format %s", format)
	return nil
}

// An image whose header claims more than MaxImagePixels is refused from
// its header with an *ImageSizeError (a user error) before any pixel is
// decoded: a PNG claiming 60000 × 60000 asked for 14.4 GB. One at the
// limit's side still decodes as far as its data goes.
func TestLoadImageRefusesHugeHeaders(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		format string
		w, h   int
	}{
		{"png", 60000, 60000},
		{"png", 1 << 27, 1},
		{"jpeg", 60000, 60000},
		{"jpeg", 8193, 8192},
	} {
		path := filepath.Join(dir, "huge."+c.format)
		require.NoError(t, os.WriteFile(path, claimSize(t, c.format, c.w, c.h), 0o644))
		_, err := LoadImage(path, 8)
		var se *ImageSizeError
		require.ErrorAs(t, err, &se, "%s %d × %d", c.format, c.w, c.h)
		require.Equal(t, [2]int{c.w, c.h}, [2]int{se.Width, se.Height})
		require.True(t, recipes.IsUserError(err))
	}
	// 4 × 4 as encoded: decodes after its header was read.
	for _, format := range []string{"png", "jpeg"} {
		path := filepath.Join(dir, "small."+format)
		require.NoError(t, os.WriteFile(path, claimSize(t, format, 4, 4), 0o644))
		px, err := LoadImage(path, 8)
		require.NoError(t, err, format)
		require.Len(t, px, 3*8*8)
	}
}
