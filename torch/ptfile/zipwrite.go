package ptfile

import (
	"bytes"
	bin "encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"strings"
)

// This file writes the zip container as PyTorch's writer lays it out
// (caffe2's PyTorchStreamWriter over miniz, as in PyTorch 2.x), byte for
// byte: the same local headers, padding, data descriptors, central
// directory, zip64 end records and serialization id. The layout matters
// beyond identical files: a file with a .format_version record tells
// PyTorch 2.x it may compute storage offsets from the records' sizes
// alone (torch.load with mmap, map_location="meta" or a fake tensor
// mode), assuming exactly this layout.

// Zip constants (miniz's names in comments).
const (
	sigLocal      = 0x04034b50 // MZ_ZIP_LOCAL_DIR_HEADER_SIG
	sigCentral    = 0x02014b50 // MZ_ZIP_CENTRAL_DIR_HEADER_SIG
	sigDescriptor = 0x08074b50 // MZ_ZIP_DATA_DESCRIPTOR_ID
	sigEnd64      = 0x06064b50 // MZ_ZIP64_END_OF_CENTRAL_DIR_HEADER_SIG
	sigLocator64  = 0x07064b50 // MZ_ZIP64_END_OF_CENTRAL_DIR_LOCATOR_SIG
	sigEnd        = 0x06054b50 // MZ_ZIP_END_OF_CENTRAL_DIR_HEADER_SIG

	flagDescriptor = 0x0008 // MZ_ZIP_LDH_BIT_FLAG_HAS_LOCATOR: sizes follow the data
	flagUTF8       = 0x0800 // MZ_ZIP_GENERAL_PURPOSE_BIT_FLAG_UTF8

	localHeaderLen = 30
	u32max         = math.MaxUint32
)

// recordAlign is the alignment of record data: PyTorch's default
// torch.utils.serialization.config.save.storage_alignment, written in the
// .storage_alignment record.
const recordAlign = 64

// serializationIDRecord holds PyTorch 2.x's serialization id.
const serializationIDRecord = ".data/serialization_id"

// zipWriter writes stored (uncompressed) records as PyTorch's writer does.
type zipWriter struct {
	w       io.Writer
	prefix  string // "archive/"
	off     uint64 // bytes written so far
	central bytes.Buffer
	count   uint64
	names   []string // record names without the prefix, in write order
	crcs    uint64   // PyTorch's combined_uncomp_crc32_
	scratch []byte
}

func newZipWriter(w io.Writer, archive string) *zipWriter {
	return &zipWriter{w: w, prefix: archive + "/"}
}

func (z *zipWriter) write(b []byte) error {
	n, err := z.w.Write(b)
	z.off += uint64(n)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	return err
}

// zip64Extra is miniz's zip64 extended information field: the sizes when
// the record is 4 GiB or larger, the header offset when it starts past
// 4 GiB. (The local header's copy holds a compressed size of 0: miniz
// writes it before the data.)
func zip64Extra(size, compSize, offset uint64) []byte {
	var b []byte
	b = bin.LittleEndian.AppendUint16(b, 0x0001)
	b = bin.LittleEndian.AppendUint16(b, 0)
	if size >= u32max {
		b = bin.LittleEndian.AppendUint64(b, size)
		b = bin.LittleEndian.AppendUint64(b, compSize)
	}
	if offset >= u32max {
		b = bin.LittleEndian.AppendUint64(b, offset)
	}
	bin.LittleEndian.PutUint16(b[2:], uint16(len(b)-4))
	return b
}

// record writes one stored record, its data starting at a multiple of
// recordAlign: the local header, the name, a zip64 field where needed,
// an "FB" extra field of 'Z' padding, the data, and a data descriptor
// for non-empty data.
func (z *zipWriter) record(name string, data []byte) error {
	full := z.prefix + name
	if len(full) > math.MaxUint16 {
		return fmt.Errorf("record name %q is too long", full)
	}
	size, offset := uint64(len(data)), z.off
	crc := crc32.ChecksumIEEE(data)
	var ext64 []byte
	if size >= u32max || offset >= u32max {
		ext64 = zip64Extra(size, 0, offset)
	}
	start := offset + localHeaderLen + uint64(len(full)) + uint64(len(ext64)) + 4
	pad := (recordAlign - start%recordAlign) % recordAlign
	flags := uint16(flagUTF8)
	if size > 0 {
		flags |= flagDescriptor
	}

	h := z.scratch[:0]
	h = bin.LittleEndian.AppendUint32(h, sigLocal)
	h = bin.LittleEndian.AppendUint16(h, 0) // version needed (miniz: 0 when stored)
	h = bin.LittleEndian.AppendUint16(h, flags)
	h = append(h, make([]byte, 2+2+2+4+4+4)...) // method, time, date, CRC and sizes: 0 (the descriptor has them)
	h = bin.LittleEndian.AppendUint16(h, uint16(len(full)))
	h = bin.LittleEndian.AppendUint16(h, uint16(uint64(len(ext64))+4+pad))
	h = append(h, full...)
	h = append(h, ext64...)
	h = append(h, 'F', 'B', byte(pad), byte(pad>>8))
	for range pad {
		h = append(h, 'Z')
	}
	z.scratch = h
	if err := z.write(h); err != nil {
		return err
	}
	if err := z.write(data); err != nil {
		return err
	}
	// PyTorch's writer folds the CRC of every data descriptor it writes
	// into the serialization id, recognizing one as any write that starts
	// with the descriptor's signature: data that starts so counts too.
	if size >= 8 && bin.LittleEndian.Uint32(data) == sigDescriptor {
		z.crcs = hashCombine(z.crcs, uint64(bin.LittleEndian.Uint32(data[4:])))
	}
	if size > 0 {
		d := bin.LittleEndian.AppendUint32(z.scratch[:0], sigDescriptor)
		d = bin.LittleEndian.AppendUint32(d, crc)
		if ext64 != nil {
			d = bin.LittleEndian.AppendUint64(d, size)
			d = bin.LittleEndian.AppendUint64(d, size)
		} else {
			d = bin.LittleEndian.AppendUint32(d, uint32(size))
			d = bin.LittleEndian.AppendUint32(d, uint32(size))
		}
		if err := z.write(d); err != nil {
			return err
		}
		z.crcs = hashCombine(z.crcs, uint64(crc))
	}

	c := &z.central
	c.Write(bin.LittleEndian.AppendUint32(nil, sigCentral))
	c.Write(make([]byte, 4)) // version made by, version needed: 0
	c.Write(bin.LittleEndian.AppendUint16(nil, flags))
	c.Write(make([]byte, 6)) // method, time, date
	c.Write(bin.LittleEndian.AppendUint32(nil, crc))
	c.Write(bin.LittleEndian.AppendUint32(nil, uint32(min(size, u32max))))
	c.Write(bin.LittleEndian.AppendUint32(nil, uint32(min(size, u32max))))
	if ext64 != nil {
		ext64 = zip64Extra(size, size, offset)
	}
	c.Write(bin.LittleEndian.AppendUint16(nil, uint16(len(full))))
	c.Write(bin.LittleEndian.AppendUint16(nil, uint16(len(ext64))))
	c.Write(make([]byte, 2+2+2+4)) // comment length, disk, internal and external attributes
	c.Write(bin.LittleEndian.AppendUint32(nil, uint32(min(offset, u32max))))
	c.WriteString(full)
	c.Write(ext64)
	z.count++
	z.names = append(z.names, name)
	return nil
}

// close writes the serialization id record, the central directory and
// the zip64 and classic end records (PyTorch always writes zip64 ones).
func (z *zipWriter) close() error {
	if err := z.record(serializationIDRecord, []byte(serializationID(z.names, z.crcs))); err != nil {
		return err
	}
	cdOffset, cdSize := z.off, uint64(z.central.Len())
	if err := z.write(z.central.Bytes()); err != nil {
		return err
	}
	end64 := z.off
	var b []byte
	b = bin.LittleEndian.AppendUint32(b, sigEnd64)
	b = bin.LittleEndian.AppendUint64(b, 44) // the record's size after this field
	b = bin.LittleEndian.AppendUint16(b, 0x031e)
	b = bin.LittleEndian.AppendUint16(b, 0x002d)
	b = bin.LittleEndian.AppendUint32(b, 0)
	b = bin.LittleEndian.AppendUint32(b, 0)
	b = bin.LittleEndian.AppendUint64(b, z.count)
	b = bin.LittleEndian.AppendUint64(b, z.count)
	b = bin.LittleEndian.AppendUint64(b, cdSize)
	b = bin.LittleEndian.AppendUint64(b, cdOffset)

	b = bin.LittleEndian.AppendUint32(b, sigLocator64)
	b = bin.LittleEndian.AppendUint32(b, 0)
	b = bin.LittleEndian.AppendUint64(b, end64)
	b = bin.LittleEndian.AppendUint32(b, 1)

	b = bin.LittleEndian.AppendUint32(b, sigEnd)
	b = bin.LittleEndian.AppendUint32(b, 0) // disk numbers
	b = bin.LittleEndian.AppendUint16(b, uint16(min(z.count, math.MaxUint16)))
	b = bin.LittleEndian.AppendUint16(b, uint16(min(z.count, math.MaxUint16)))
	b = bin.LittleEndian.AppendUint32(b, uint32(min(cdSize, u32max)))
	b = bin.LittleEndian.AppendUint32(b, uint32(min(cdOffset, u32max)))
	b = bin.LittleEndian.AppendUint16(b, 0) // comment length
	return z.write(b)
}

// serializationID is the id PyTorch 2.x's writer records: 20 decimal
// digits of a hash combining the record names' hashes, in the iteration
// order of the writer's std::unordered_set of names, then 20 of the
// descriptors' CRCs combined in write order. It is deterministic, so Go
// computes what the writer would. The names' part assumes libstdc++ (the
// hash and the hash table of Linux builds of PyTorch); elsewhere only
// this record would differ, and torch.load does not check it.
func serializationID(names []string, crcs uint64) string {
	var h uint64
	for _, name := range unorderedSetOrder(names) {
		h = hashCombine(h, stdHash(name))
	}
	return fmt.Sprintf("%020d%020d", h, crcs)
}

// hashCombine is c10::hash_combine.
func hashCombine(seed, value uint64) uint64 {
	return seed ^ (value + 0x9e3779b9 + (seed << 6) + (seed >> 2))
}

// stdHash is libstdc++'s std::hash<std::string> on 64-bit machines:
// _Hash_bytes (a MurmurHash2 variant) with seed 0xc70f6907.
func stdHash(s string) uint64 {
	const mul = 0xc6a4a7935bd1e995
	shiftMix := func(v uint64) uint64 { return v ^ (v >> 47) }
	n := len(s)
	aligned := n &^ 7
	h := 0xc70f6907 ^ (uint64(n) * mul)
	for i := 0; i < aligned; i += 8 {
		d := shiftMix(bin.LittleEndian.Uint64([]byte(s[i:i+8]))*mul) * mul
		h ^= d
		h *= mul
	}
	if n&7 != 0 {
		var d uint64
		for i := n - 1; i >= aligned; i-- {
			d = d<<8 | uint64(s[i])
		}
		h ^= d
		h *= mul
	}
	h = shiftMix(h) * mul
	return shiftMix(h)
}

// unorderedSetOrder is the order in which a libstdc++
// std::unordered_set<std::string> iterates over names inserted in this
// order: a singly linked list in which a node goes first when its bucket
// is empty and right after its bucket's anchor otherwise, rebuilt the same
// way whenever the prime rehash policy grows the table.
func unorderedSetOrder(names []string) []string {
	const none, head = -1, 0 // node 0 is the list's before-begin anchor
	type node struct {
		hash uint64
		next int
	}
	nodes := []node{{next: none}}
	buckets := []int{none}
	var nextResize uint64
	nextBucketCount := func(n uint64) uint64 {
		// _Prime_rehash_policy::_M_next_bkt with max_load_factor 1.
		fast := [...]uint64{2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13}
		if n < uint64(len(fast)) {
			nextResize = fast[n]
			return fast[n]
		}
		for _, p := range rehashPrimes {
			if p >= n {
				nextResize = p
				return p
			}
		}
		nextResize = math.MaxUint64
		return n
	}
	rehash := func(nb uint64) {
		nbk := make([]int, nb)
		for k := range nbk {
			nbk[k] = none
		}
		p := nodes[head].next
		nodes[head].next = none
		var beginBucket uint64
		for p != none {
			next := nodes[p].next
			b := nodes[p].hash % nb
			if nbk[b] == none {
				nodes[p].next = nodes[head].next
				nodes[head].next = p
				nbk[b] = head
				if nodes[p].next != none {
					nbk[beginBucket] = p
				}
				beginBucket = b
			} else {
				nodes[p].next = nodes[nbk[b]].next
				nodes[nbk[b]].next = p
			}
			p = next
		}
		buckets = nbk
	}
	for k, name := range names {
		elems := uint64(k) // the names are distinct
		if elems+1 > nextResize {
			minBuckets := elems + 1
			if nextResize == 0 {
				minBuckets = max(minBuckets, 11)
			}
			if nb := uint64(len(buckets)); minBuckets >= nb {
				rehash(nextBucketCount(max(minBuckets+1, nb*2)))
			} else {
				nextResize = nb
			}
		}
		nb := uint64(len(buckets))
		n := len(nodes)
		nodes = append(nodes, node{hash: stdHash(name), next: none})
		b := nodes[n].hash % nb
		if buckets[b] != none {
			nodes[n].next = nodes[buckets[b]].next
			nodes[buckets[b]].next = n
		} else {
			nodes[n].next = nodes[head].next
			nodes[head].next = n
			if next := nodes[n].next; next != none {
				buckets[nodes[next].hash%nb] = n
			}
			buckets[b] = head
		}
	}
	out := make([]string, 0, len(names))
	for p := nodes[head].next; p != none; p = nodes[p].next {
		out = append(out, names[p-1])
	}
	return out
}

// rehashPrimes are libstdc++'s bucket counts (its __prime_list) from 17
// up to 2^32; a zip holds fewer records than would need more.
var rehashPrimes = [...]uint64{
	17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79,
	83, 89, 97, 103, 109, 113, 127, 137, 139, 149, 157, 167, 179, 193, 199, 211,
	227, 241, 257, 277, 293, 313, 337, 359, 383, 409, 439, 467, 503, 541, 577, 619,
	661, 709, 761, 823, 887, 953, 1031, 1109, 1193, 1289, 1381, 1493, 1613, 1741, 1879, 2029,
	2179, 2357, 2549, 2753, 2971, 3209, 3469, 3739, 4027, 4349, 4703, 5087, 5503, 5953, 6427, 6949,
	7517, 8123, 8783, 9497, 10273, 11113, 12011, 12983, 14033, 15173, 16411, 17749, 19183, 20753, 22447, 24281,
	26267, 28411, 30727, 33223, 35933, 38873, 42043, 45481, 49201, 53201, 57557, 62233, 67307, 72817, 78779, 85229,
	92203, 99733, 107897, 116731, 126271, 136607, 147793, 159871, 172933, 187091, 202409, 218971, 236897, 256279, 277261, 299951,
	324503, 351061, 379787, 410857, 444487, 480881, 520241, 562841, 608903, 658753, 712697, 771049, 834181, 902483, 976369, 1056323,
	1142821, 1236397, 1337629, 1447153, 1565659, 1693859, 1832561, 1982627, 2144977, 2320627, 2510653, 2716249, 2938679, 3179303, 3439651, 3721303,
	4026031, 4355707, 4712381, 5098259, 5515729, 5967347, 6456007, 6984629, 7556579, 8175383, 8844859, 9569143, 10352717, 11200489, 12117689, 13109983,
	14183539, 15345007, 16601593, 17961079, 19431899, 21023161, 22744717, 24607243, 26622317, 28802401, 31160981, 33712729, 36473443, 39460231, 42691603, 46187573,
	49969847, 54061849, 58488943, 63278561, 68460391, 74066549, 80131819, 86693767, 93793069, 101473717, 109783337, 118773397, 128499677, 139022417, 150406843, 162723577,
	176048909, 190465427, 206062531, 222936881, 241193053, 260944219, 282312799, 305431229, 330442829, 357502601, 386778277, 418451333, 452718089, 489790921, 529899637, 573292817,
	620239453, 671030513, 725980837, 785430967, 849749479, 919334987, 994618837, 1076067617, 1164186217, 1259520799, 1362662261, 1474249943, 1594975441, 1725587117, 1866894511, 2019773507,
	2185171673, 2364114217, 2557710269, 2767159799, 2993761039, 3238918481, 3504151727, 3791104843, 4101556399, 4294967291,
}

// archiveName is the folder name inside the zip for a file path, as
// PyTorch's writer derives it: the base name up to its last dot, or
// "archive" where that is empty or, as in PyTorch 2.x, the path is not
// ASCII (Python then writes through a stream, named "archive").
func archiveName(path string) string {
	for _, r := range path {
		if r >= 0x80 {
			return "archive"
		}
	}
	base := path[strings.LastIndexAny(path, `/\`)+1:]
	if i := strings.LastIndexByte(base, '.'); i >= 0 {
		base = base[:i]
	}
	if base == "" {
		return "archive"
	}
	return base
}
