package mamba

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/torchfit/torchfit/atomicfile"
	"github.com/torchfit/torchfit/recipes"
)

// Tokenizer is GPT-2's byte-level BPE (tiktoken's r50k_base), loaded from
// the ranks compiled into the binary (no network).
type Tokenizer struct{ enc *tiktoken.Tiktoken }

var (
	tokOnce sync.Once
	tokEnc  *tiktoken.Tiktoken
	tokErr  error
)

// NewTokenizer returns the GPT-2 tokenizer.
func NewTokenizer() (*Tokenizer, error) {
	tokOnce.Do(func() {
		tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
		tokEnc, tokErr = tiktoken.GetEncoding(TokenizerName)
	})
	if tokErr != nil {
		return nil, fmt.Errorf("mamba: tokenizer %s: %w", TokenizerName, tokErr)
	}
	return &Tokenizer{tokEnc}, nil
}

// Encode tokenises text as ordinary text ("<|endoftext|>" in it is text).
func (t *Tokenizer) Encode(text string) []int { return t.enc.EncodeOrdinary(text) }

// Decode turns token ids back into text.
func (t *Tokenizer) Decode(ids []int) string { return t.enc.Decode(ids) }

// Meta is a data directory's meta.json: what the token files hold.
type Meta struct {
	Tokenizer   string `json:"tokenizer"`
	VocabSize   int    `json:"vocab_size"`
	Source      string `json:"source"`
	TrainTokens int64  `json:"train_tokens"`
	ValidTokens int64  `json:"valid_tokens"`
	TrainChars  int64  `json:"train_chars"`
	ValidChars  int64  `json:"valid_chars"`
	// Unigram is the held-out cross-entropy (nats/token) of the training
	// split's token frequencies (add-one smoothed): a model that ignores
	// context.
	Unigram float64 `json:"unigram_nats_per_token"`
}

// The files of a data directory: uint16 little-endian token ids.
const (
	trainFile = "train.bin"
	validFile = "valid.bin"
	metaFile  = "meta.json"
)

// DataConfig is `torchfit mamba data`.
type DataConfig struct {
	Out string
	// Text lists UTF-8 text files to use instead of the King James Bible.
	Text []string
	// ValidFraction is the held-out share of the text, taken from its end
	// (by bytes, at a line boundary).
	ValidFraction float64
	// Overwrite replaces a corpus already in Out.
	Overwrite bool
	Workers   int
}

// DataError is a user's data problem: a missing program or file, text that
// is not UTF-8, a directory that already holds a corpus.
type DataError struct{ Err error }

func (e *DataError) Error() string { return e.Err.Error() }
func (e *DataError) Unwrap() error { return e.Err }

// UserError marks it as the user's (exit status 2).
func (*DataError) UserError() {}

func dataErrorf(format string, args ...any) error { return &DataError{fmt.Errorf(format, args...)} }

// kjv returns the King James Bible from Debian's bible-kjv, one verse per
// line without its reference: `bible -f Gen1:1-Rev22:21` prints every verse
// as "Ge1:1 In the beginning ...".
func kjv(ctx context.Context) ([]string, error) {
	prog, err := exec.LookPath("bible")
	if err != nil {
		return nil, dataErrorf("mamba: the `bible` program is missing: install Debian's bible-kjv (make deps), or give --text FILES")
	}
	cmd := exec.CommandContext(ctx, prog, "-f", "Gen1:1-Rev22:21")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("mamba: %s: %w: %s", prog, err, strings.TrimSpace(stderr.String()))
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		ref, text, ok := strings.Cut(sc.Text(), " ")
		if !ok || !strings.Contains(ref, ":") {
			continue
		}
		if text = strings.TrimSpace(text); text != "" {
			lines = append(lines, text)
		}
	}
	if len(lines) < 30000 {
		return nil, fmt.Errorf("mamba: %s printed %d verses; the King James Bible has 31102", prog, len(lines))
	}
	return lines, nil
}

// textFiles reads UTF-8 text files as lines (empty lines kept: paragraph
// breaks are text too).
func textFiles(paths []string) ([]string, error) {
	var lines []string
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, &DataError{fmt.Errorf("mamba: --text: %w", err)}
		}
		if !utf8.Valid(raw) {
			return nil, dataErrorf("mamba: --text %s: not UTF-8 text", p)
		}
		s := strings.ReplaceAll(string(raw), "\r\n", "\n")
		lines = append(lines, strings.Split(strings.TrimRight(s, "\n"), "\n")...)
	}
	if len(lines) == 0 {
		return nil, dataErrorf("mamba: --text: no text")
	}
	return lines, nil
}

// DataStats is what BuildData did.
type DataStats struct {
	Meta    Meta
	Elapsed time.Duration
}

// BuildData tokenises the corpus once into dir/train.bin and dir/valid.bin
// (uint16 token ids, memory-mapped by training) and writes dir/meta.json.
// The held-out split is the text's last ValidFraction (5 %: for the Bible,
// from 2 Peter to Revelation's end). Files are written atomically.
func BuildData(ctx context.Context, cfg DataConfig) (DataStats, error) {
	start := time.Now()
	var st DataStats
	if cfg.ValidFraction <= 0 || cfg.ValidFraction >= 1 || math.IsNaN(cfg.ValidFraction) {
		return st, dataErrorf("mamba: --valid-fraction %v: must be in (0, 1)", cfg.ValidFraction)
	}
	if cfg.Workers < 0 || cfg.Workers > recipes.MaxWorkers {
		return st, dataErrorf("mamba: --workers %d: must be in [0, %d] (0: all CPUs)", cfg.Workers, recipes.MaxWorkers)
	}
	if _, err := os.Stat(filepath.Join(cfg.Out, metaFile)); err == nil && !cfg.Overwrite {
		return st, dataErrorf("mamba: %s already holds a corpus (%s): pass --overwrite to rebuild it", cfg.Out, metaFile)
	}
	var lines []string
	var err error
	source := "King James Bible (Debian bible-kjv, `bible -f Gen1:1-Rev22:21`), one verse per line"
	if len(cfg.Text) > 0 {
		lines, err = textFiles(cfg.Text)
		source = "text files: " + strings.Join(cfg.Text, ", ")
	} else {
		lines, err = kjv(ctx)
	}
	if err != nil {
		return st, err
	}
	total := 0
	for _, l := range lines {
		total += len(l) + 1
	}
	cut, acc := len(lines), 0
	for i, l := range lines {
		if float64(acc) >= float64(total)*(1-cfg.ValidFraction) {
			cut = i
			break
		}
		acc += len(l) + 1
	}
	if cut == 0 || cut == len(lines) {
		return st, dataErrorf("mamba: %d lines of text are too few to hold out %.0f %%", len(lines), cfg.ValidFraction*100)
	}
	tok, err := NewTokenizer()
	if err != nil {
		return st, err
	}
	train, err := encodeLines(ctx, tok, lines[:cut], cfg.Workers)
	if err != nil {
		return st, err
	}
	valid, err := encodeLines(ctx, tok, lines[cut:], cfg.Workers)
	if err != nil {
		return st, err
	}
	m := Meta{Tokenizer: TokenizerName, VocabSize: VocabSize, Source: source,
		TrainTokens: int64(len(train)), ValidTokens: int64(len(valid)),
		TrainChars: chars(lines[:cut]), ValidChars: chars(lines[cut:]), Unigram: unigram(train, valid)}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return st, &DataError{fmt.Errorf("mamba: --out: %w", err)}
	}
	if err := writeTokens(filepath.Join(cfg.Out, trainFile), train); err != nil {
		return st, err
	}
	if err := writeTokens(filepath.Join(cfg.Out, validFile), valid); err != nil {
		return st, err
	}
	js, _ := json.MarshalIndent(m, "", "  ")
	if err := writeOut(filepath.Join(cfg.Out, metaFile), append(js, '\n')); err != nil {
		return st, err
	}
	st.Meta, st.Elapsed = m, time.Since(start)
	return st, nil
}

func chars(lines []string) int64 {
	var n int64
	for _, l := range lines {
		n += int64(utf8.RuneCountInString(l)) + 1
	}
	return n
}

// encodeLines tokenises lines + "\n" in blocks on workers, in order.
func encodeLines(ctx context.Context, tok *Tokenizer, lines []string, workers int) ([]uint16, error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	const block = 500
	nb := (len(lines) + block - 1) / block
	workers = min(workers, nb) // at most one a block: more would only wait
	parts := make([][]int, nb)
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range next {
				end := min((b+1)*block, len(lines))
				parts[b] = tok.Encode(strings.Join(lines[b*block:end], "\n") + "\n")
			}
		}()
	}
	for b := range nb {
		if ctx.Err() != nil {
			break
		}
		next <- b
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []uint16
	for _, p := range parts {
		for _, id := range p {
			if id < 0 || id >= VocabSize {
				return nil, fmt.Errorf("mamba: tokenizer gave id %d outside its vocabulary", id)
			}
			out = append(out, uint16(id))
		}
	}
	return out, nil
}

// unigram is the cross-entropy of valid under train's add-one smoothed
// token frequencies, in nats per token.
func unigram(train, valid []uint16) float64 {
	counts := make([]float64, VocabSize)
	for _, id := range train {
		counts[id]++
	}
	total := float64(len(train) + VocabSize)
	var nll float64
	for _, id := range valid {
		nll -= math.Log((counts[id] + 1) / total)
	}
	return nll / float64(len(valid))
}

func writeTokens(path string, ids []uint16) error {
	buf := make([]byte, 2*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint16(buf[2*i:], id)
	}
	return writeOut(path, buf)
}

// writeOut writes a file of the data set atomically. An --out the user
// may not write to (permissions, a read-only file system) is a DataError.
func writeOut(path string, data []byte) error {
	err := atomicfile.WriteFile(path, data)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return &DataError{fmt.Errorf("mamba: --out: %w", err)}
	}
	return fmt.Errorf("mamba: writing %s: %w", path, err)
}

// Tokens is a memory-mapped token file.
type Tokens struct {
	data []byte
	ids  []uint16
}

// ErrBadTokens marks a token file that is not one: odd size, ids outside
// the vocabulary.
var ErrBadTokens = errors.New("not a token file")

// OpenTokens maps path (uint16 little-endian ids, every one < vocab).
func OpenTokens(path string, vocab int) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &DataError{fmt.Errorf("mamba: %w", err)}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	if size == 0 || size%2 != 0 {
		return nil, &DataError{fmt.Errorf("mamba: %s: %w (%d bytes: want an even, non-zero size)", path, ErrBadTokens, size)}
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mamba: mmap %s: %w", path, err)
	}
	t := &Tokens{data: data}
	if isLittleEndian() {
		t.ids = unsafe.Slice((*uint16)(unsafe.Pointer(&data[0])), len(data)/2)
	} else {
		t.ids = make([]uint16, len(data)/2)
		for i := range t.ids {
			t.ids[i] = binary.LittleEndian.Uint16(data[2*i:])
		}
	}
	for i, id := range t.ids {
		if int(id) >= vocab {
			t.Close()
			return nil, &DataError{fmt.Errorf("mamba: %s: %w (token %d is %d, the vocabulary has %d)", path, ErrBadTokens, i, id, vocab)}
		}
	}
	return t, nil
}

func isLittleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

// Len is the number of tokens.
func (t *Tokens) Len() int { return len(t.ids) }

// IDs returns the tokens (valid until Close).
func (t *Tokens) IDs() []uint16 { return t.ids }

// Close unmaps the file.
func (t *Tokens) Close() error {
	if t.data == nil {
		return nil
	}
	err := syscall.Munmap(t.data)
	t.data, t.ids = nil, nil
	return err
}

// ReadMeta reads dir/meta.json.
func ReadMeta(dir string) (Meta, error) {
	var m Meta
	raw, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return m, dataErrorf("mamba: no corpus in %s (%s missing): create one with `torchfit mamba data --out %s`", dir, metaFile, dir)
		}
		return m, &DataError{fmt.Errorf("mamba: %w", err)}
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return m, dataErrorf("mamba: %s: %v", filepath.Join(dir, metaFile), err)
	}
	if m.Tokenizer != TokenizerName || m.VocabSize != VocabSize {
		return m, dataErrorf("mamba: %s was tokenised with %s (%d tokens), not %s (%d)", dir, m.Tokenizer, m.VocabSize, TokenizerName, VocabSize)
	}
	return m, nil
}
