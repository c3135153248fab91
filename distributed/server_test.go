package distributed_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/distributed"
)

// The query types of c10d's TCPStore clients: libtorch 1.13's (2.0 added
// APPEND to CANCEL_WAIT) and 2.x's (TCPStoreBackend.hpp, 2.11).
var (
	v1Types = map[string]byte{"SET": 0, "COMPARE_SET": 1, "GET": 2, "ADD": 3, "CHECK": 4, "WAIT": 5,
		"GETNUMKEYS": 6, "WATCH_KEY": 7, "DELETE_KEY": 8, "APPEND": 9, "MULTI_GET": 10, "MULTI_SET": 11,
		"CANCEL_WAIT": 12}
	v2Types = map[string]byte{"VALIDATE": 0, "SET": 1, "COMPARE_SET": 2, "GET": 3, "ADD": 4, "CHECK": 5,
		"WAIT": 6, "GETNUMKEYS": 7, "DELETE_KEY": 8, "APPEND": 9, "MULTI_GET": 10, "MULTI_SET": 11,
		"CANCEL_WAIT": 12, "PING": 13, "QUEUE_PUSH": 14, "QUEUE_POP": 15, "QUEUE_LEN": 16, "LIST_KEYS": 17}
)

const validateMagic = 0x3C85F7CE

// step is one query a client sends and the reply it reads.
type step struct {
	conn   int    // which client
	op     string // c10d's QueryType name
	args   []any  // string, int64 (8 bytes), uint32, []string (a key list)
	want   []byte // the reply; nil: none
	closed bool   // the server drops the connection instead
}

func encode(t *testing.T, typ byte, args []any) []byte {
	b := []byte{typ}
	for _, a := range args {
		switch a := a.(type) {
		case string:
			b = str(b, a)
		case int64:
			b = binary.LittleEndian.AppendUint64(b, uint64(a))
		case uint32:
			b = binary.LittleEndian.AppendUint32(b, a)
		case []string:
			b = binary.LittleEndian.AppendUint64(b, uint64(len(a)))
			for _, k := range a {
				b = str(b, k)
			}
		default:
			t.Fatalf("argument %v", a)
		}
	}
	return b
}

func str(b []byte, s string) []byte {
	return append(binary.LittleEndian.AppendUint64(b, uint64(len(s))), s...)
}

// strs is a reply of strings; u64 one of an integer.
func strs(ss ...string) []byte {
	var b []byte
	for _, s := range ss {
		b = str(b, s)
	}
	return b
}

func u64(v int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(v)) }

// cat is replies read one after the other.
func cat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

// dialStore connects as a client of libtorch 1.13 (v2 false) or 2.x, which
// opens with VALIDATE and PING.
func dialStore(t *testing.T, srv *distributed.StoreServer, v2 bool) net.Conn {
	c, err := net.Dial("tcp", srv.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	if v2 {
		hello := encode(t, v2Types["VALIDATE"], []any{uint32(validateMagic)})
		hello = append(hello, encode(t, v2Types["PING"], []any{uint32(4242)})...)
		_, err := c.Write(hello)
		require.NoError(t, err)
		require.Equal(t, binary.LittleEndian.AppendUint32(nil, 4242), readN(t, c, 4))
	}
	return c
}

func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	b := make([]byte, n)
	_, err := io.ReadFull(c, b)
	require.NoError(t, err)
	return b
}

// run plays steps on clients of the given dialects (true: 2.x).
func run(t *testing.T, v2 []bool, steps []step) {
	srv, err := distributed.ListenStore("127.0.0.1:0")
	require.NoError(t, err)
	defer srv.Close()
	conns := make([]net.Conn, len(v2))
	for i, v := range v2 {
		conns[i] = dialStore(t, srv, v)
	}
	for i, s := range steps {
		types := v1Types
		if v2[s.conn] {
			types = v2Types
		}
		typ, ok := types[s.op]
		require.True(t, ok, "step %d: %s", i, s.op)
		c := conns[s.conn]
		_, err := c.Write(encode(t, typ, s.args))
		require.NoError(t, err, "step %d: %s", i, s.op)
		switch {
		case s.closed:
			require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
			_, err := c.Read(make([]byte, 1))
			require.ErrorIs(t, err, io.EOF, "step %d: %s", i, s.op)
		case s.want != nil:
			require.Equal(t, s.want, readN(t, c, len(s.want)), "step %d: %s", i, s.op)
		}
	}
}

// distributed.StoreServer speaks both numberings of c10d's TCPStore queries, each
// connection the one its client opens with, and both answer the same.
func TestStoreServerProtocols(t *testing.T) {
	common := []struct {
		name  string
		steps []step
	}{
		{"set and get", []step{
			{op: "SET", args: []any{"a", "hello"}},
			{op: "GET", args: []any{"a"}, want: strs("hello")},
		}},
		{"add", []step{
			{op: "ADD", args: []any{"n", int64(5)}, want: u64(5)},
			{op: "ADD", args: []any{"n", int64(-2)}, want: u64(3)},
			{op: "GET", args: []any{"n"}, want: strs("3")},
		}},
		{"compare and set", []step{
			{op: "COMPARE_SET", args: []any{"c", "", "first"}, want: strs("first")},
			{op: "COMPARE_SET", args: []any{"c", "first", "second"}, want: strs("second")},
			{op: "COMPARE_SET", args: []any{"c", "nope", "third"}, want: strs("second")},
			{op: "COMPARE_SET", args: []any{"absent", "x", "y"}, want: strs("x")},
		}},
		{"check and wait", []step{
			{op: "CHECK", args: []any{[]string{"a", "b"}}, want: []byte{1}},
			{op: "SET", args: []any{"a", "1"}},
			{op: "SET", args: []any{"b", "2"}},
			{op: "CHECK", args: []any{[]string{"a", "b"}}, want: []byte{0}},
			{op: "WAIT", args: []any{[]string{"a", "b"}}, want: []byte{0}},
		}},
		{"wait released by another client", []step{
			{op: "WAIT", args: []any{[]string{"x", "y"}}},
			{conn: 1, op: "SET", args: []any{"x", "1"}},
			{conn: 1, op: "ADD", args: []any{"y", int64(1)}, want: u64(1)},
			{op: "GETNUMKEYS", want: cat([]byte{0}, u64(2))}, // STOP_WAITING first
		}},
		{"delete and count", []step{
			{op: "SET", args: []any{"a", "1"}},
			{op: "SET", args: []any{"b", "2"}},
			{op: "GETNUMKEYS", want: u64(2)},
			{op: "DELETE_KEY", args: []any{"a"}, want: u64(1)},
			{op: "DELETE_KEY", args: []any{"a"}, want: u64(0)},
			{op: "GETNUMKEYS", want: u64(1)},
		}},
		{"append, multi-set and multi-get", []step{
			{op: "APPEND", args: []any{"k", "ab"}},
			{op: "APPEND", args: []any{"k", "cd"}},
			{op: "MULTI_SET", args: []any{int64(2), "x", "1", "y", "22"}},
			{op: "MULTI_GET", args: []any{[]string{"k", "x", "y"}}, want: strs("abcd", "1", "22")},
		}},
		{"a malformed length drops the client", []step{
			{op: "SET", args: []any{int64(1 << 40)}, closed: true},
		}},
	}
	for _, v2 := range []bool{false, true} {
		for _, c := range common {
			t.Run(fmt.Sprintf("%s/%s", dialect(v2), c.name), func(t *testing.T) {
				run(t, []bool{v2, v2}, c.steps)
			})
		}
	}
}

func dialect(v2 bool) string {
	if v2 {
		return "2.x"
	}
	return "1.13"
}

// What one generation of the protocol has and the other has not.
func TestStoreServerProtocolDifferences(t *testing.T) {
	for _, c := range []struct {
		name  string
		v2    []bool
		steps []step
	}{
		{"1.13: watch a key", []bool{false, false}, []step{
			{op: "WATCH_KEY", args: []any{"k"}, want: []byte{3}},
			{conn: 1, op: "SET", args: []any{"k", "v"}},
			{conn: 1, op: "GETNUMKEYS", want: u64(1)},
			{op: "GET", args: []any{"k"}, want: cat([]byte{1}, strs("k", "", "v"), strs("v"))},
		}},
		{"1.13: a get of a missing key drops the client", []bool{false}, []step{
			{op: "GET", args: []any{"nope"}, closed: true},
		}},
		{"2.x: a get of a missing key is empty", []bool{true}, []step{
			{op: "GET", args: []any{"nope"}, want: strs("")},
			{op: "MULTI_GET", args: []any{[]string{"nope", "nope"}}, want: strs("", "")},
		}},
		{"2.x: ping", []bool{true}, []step{
			{op: "PING", args: []any{uint32(0xdeadbeef)}, want: []byte{0xef, 0xbe, 0xad, 0xde}},
		}},
		{"2.x: a wrong VALIDATE drops the client", []bool{true}, []step{
			{op: "VALIDATE", args: []any{uint32(1)}, closed: true},
		}},
		{"2.x: a canceled wait", []bool{true, true}, []step{
			{op: "WAIT", args: []any{[]string{"never"}}},
			{op: "CANCEL_WAIT", want: []byte{1}},
			{conn: 1, op: "SET", args: []any{"never", "now"}},
			{conn: 1, op: "GETNUMKEYS", want: u64(1)},
			{op: "GET", args: []any{"never"}, want: strs("now")}, // no STOP_WAITING in between
		}},
		{"2.x: a wait canceled after it was released", []bool{true, true}, []step{
			{op: "WAIT", args: []any{[]string{"k"}}},
			{conn: 1, op: "SET", args: []any{"k", "v"}},
			{conn: 1, op: "GETNUMKEYS", want: u64(1)},
			{op: "CANCEL_WAIT", want: []byte{0, 1}}, // STOP_WAITING, then WAIT_CANCELED
		}},
		{"2.x: queues", []bool{true, true, true}, []step{
			{op: "QUEUE_LEN", args: []any{"q"}, want: u64(0)},
			{op: "QUEUE_POP", args: []any{"q"}, want: u64(0)},
			{op: "WAIT", args: []any{[]string{"q"}}},
			{op: "GETNUMKEYS", want: u64(0)}, // the wait is registered
			{conn: 1, op: "WAIT", args: []any{[]string{"q"}}},
			{conn: 1, op: "GETNUMKEYS", want: u64(0)},
			{conn: 2, op: "QUEUE_PUSH", args: []any{"q", "v1"}},
			{conn: 2, op: "QUEUE_LEN", args: []any{"q"}, want: u64(1)},
			{op: "QUEUE_POP", args: []any{"q"}, want: cat([]byte{0}, u64(1), strs("v1"))},
			{conn: 2, op: "QUEUE_PUSH", args: []any{"q", "v2"}},
			{conn: 2, op: "QUEUE_PUSH", args: []any{"q", "v3"}},
			{conn: 2, op: "QUEUE_LEN", args: []any{"q"}, want: u64(2)},
			{conn: 1, op: "QUEUE_POP", args: []any{"q"}, want: cat([]byte{0}, u64(2), strs("v2"))},
			{op: "CHECK", args: []any{[]string{"q"}}, want: []byte{0}},
			{op: "QUEUE_POP", args: []any{"q"}, want: cat(u64(1), strs("v3"))},
			{op: "CHECK", args: []any{[]string{"q"}}, want: []byte{1}},
		}},
		{"2.x: list keys", []bool{true}, []step{
			{op: "LIST_KEYS", want: u64(0)},
			{op: "SET", args: []any{"/b", "1"}},
			{op: "SET", args: []any{"/a", "2"}},
			{op: "LIST_KEYS", want: cat(u64(2), strs("/a", "/b"))},
		}},
		{"1.13 and 2.x clients share one store", []bool{false, true}, []step{
			{op: "SET", args: []any{"/k", "old"}},
			{op: "ADD", args: []any{"/n", int64(2)}, want: u64(2)},
			{conn: 1, op: "GET", args: []any{"/k"}, want: strs("old")},
			{conn: 1, op: "ADD", args: []any{"/n", int64(3)}, want: u64(5)},
			{conn: 1, op: "SET", args: []any{"/k", "new"}},
			{conn: 1, op: "GETNUMKEYS", want: u64(2)},
			{op: "GET", args: []any{"/k"}, want: strs("new")},
		}},
	} {
		t.Run(c.name, func(t *testing.T) { run(t, c.v2, c.steps) })
	}
}
