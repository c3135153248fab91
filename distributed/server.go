package distributed

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"sync"
)

// StoreServer is a TCPStore server written in Go: it speaks the wire
// protocols of c10d's TCPStore clients of libtorch 1.13 and of libtorch 2.x
// (2.11 included) — c10d's TCPStore in Go ranks and in Python ranks alike —
// and it listens on the one address it is given — c10d's own server
// listens on every interface of the machine. `torchfit launch` hosts one
// (torchrun's agent store), and so does rank 0 when no launcher does.
//
// The protocol has no authentication: anyone who reaches the port can read
// and change the rendezvous (and then the ranks' peers). Bind it to
// loopback, or to an interface of a trusted network only.
type StoreServer struct {
	ln net.Listener

	mu       sync.Mutex
	kv       map[string][]byte
	queues   map[string][][]byte // 2.x's queues (QUEUE_PUSH, QUEUE_POP)
	waiting  map[string][]*storeWaiter
	watchers map[string][]*storeConn
	conns    map[*storeConn]struct{}
	closed   bool
	wg       sync.WaitGroup
}

type storeConn struct {
	c  net.Conn
	v2 bool // the client numbers its queries as libtorch 2.x does

	// Everything written to the client (replies, wake-ups, watch events)
	// goes through out, in order, and one writer goroutine: a slow client
	// must not stall the server, and a STOP_WAITING must reach the client
	// before the WAIT_CANCELED of a later CANCEL_WAIT.
	mu   sync.Mutex
	out  net.Buffers
	wake chan struct{} // there is output (capacity 1)
	done chan struct{} // closed when the connection is dropped
}

type storeWaiter struct {
	c       *storeConn
	missing int
}

// The wire protocol: a query is one byte of type and its arguments — a
// string as a little-endian uint64 length and its bytes, an integer as 8
// little-endian bytes, a key list as a uint64 count and the strings.
// Replies use the same encodings. The two generations of c10d's client
// number the types differently (c10d's QueryType enums):
//
//   - libtorch 1.13 (TCPStore.cpp): SET 0, COMPARE_SET 1, GET 2, ADD 3,
//     CHECK 4, WAIT 5, GETNUMKEYS 6, WATCH_KEY 7, DELETE_KEY 8 — and 2.0's
//     APPEND 9, MULTI_GET 10, MULTI_SET 11, CANCEL_WAIT 12 after them;
//   - libtorch 2.x (TCPStoreBackend.hpp): VALIDATE 0, SET 1, COMPARE_SET 2,
//     GET 3, ADD 4, CHECK 5, WAIT 6, GETNUMKEYS 7, DELETE_KEY 8, APPEND 9,
//     MULTI_GET 10, MULTI_SET 11, CANCEL_WAIT 12, PING 13, QUEUE_PUSH 14,
//     QUEUE_POP 15, QUEUE_LEN 16, LIST_KEYS 17. WATCH_KEY is gone.
//
// A 2.x client opens every connection with VALIDATE and the uint32
// validateMagic (then PING, a uint32 the server echoes); a 1.13 client
// whose first query is SET sends 0 and a uint64 key length instead. So the
// first five bytes of a connection say which numbering it uses (a 1.13
// SET looks like VALIDATE only for a key of nearly 1 GiB).
type storeOp uint8

const (
	opValidate storeOp = iota
	opSet
	opCompareSet
	opGet
	opAdd
	opCheck
	opWait
	opNumKeys
	opWatch
	opDelete
	opAppend
	opMultiGet
	opMultiSet
	opCancelWait
	opPing
	opQueuePush
	opQueuePop
	opQueueLen
	opListKeys
)

// v1Ops and v2Ops map a query's type byte to its operation.
var (
	v1Ops = []storeOp{opSet, opCompareSet, opGet, opAdd, opCheck, opWait, opNumKeys, opWatch, opDelete,
		opAppend, opMultiGet, opMultiSet, opCancelWait}
	v2Ops = []storeOp{opValidate, opSet, opCompareSet, opGet, opAdd, opCheck, opWait, opNumKeys, opDelete,
		opAppend, opMultiGet, opMultiSet, opCancelWait, opPing, opQueuePush, opQueuePop, opQueueLen, opListKeys}
)

// validateMagic follows a 2.x client's VALIDATE.
const validateMagic = 0x3C85F7CE

// Replies of c10d's TCPStore.
const (
	checkReady    = 0
	checkNotReady = 1
	stopWaiting   = 0
	waitCanceled  = 1

	watchUpdated    = 0
	watchCreated    = 1
	watchDeleted    = 2
	watchRegistered = 3
	watchAppended   = 4
)

// maxStoreValue bounds a key or value a client may send (a corrupt or
// hostile length must not allocate without bound).
const maxStoreValue = 1 << 30

// ListenStore starts a store server on addr (host:port; port 0 picks a
// free one). The host must be an address of this machine.
func ListenStore(addr string) (*StoreServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &StoreServer{ln: ln, kv: map[string][]byte{}, queues: map[string][][]byte{},
		waiting: map[string][]*storeWaiter{}, watchers: map[string][]*storeConn{}, conns: map[*storeConn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr returns the address the server listens on.
func (s *StoreServer) Addr() net.Addr { return s.ln.Addr() }

// Port returns the port the server listens on.
func (s *StoreServer) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// Close stops the server and closes its clients' connections.
func (s *StoreServer) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	err := s.ln.Close()
	for c := range s.conns {
		c.c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *StoreServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		sc := &storeConn{c: c, wake: make(chan struct{}, 1), done: make(chan struct{})}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[sc] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(2)
		go s.serve(sc)
		go s.write(sc)
	}
}

// serve answers one client's queries until it disconnects or sends
// something malformed (c10d's server closes such a connection too).
func (s *StoreServer) serve(c *storeConn) {
	defer s.wg.Done()
	defer s.drop(c)
	r := bufio.NewReader(c.c)
	ops := v1Ops
	if c.v2 = opensWithValidate(r); c.v2 {
		ops = v2Ops
	}
	for {
		q, err := r.ReadByte()
		if err != nil {
			return
		}
		if int(q) >= len(ops) {
			return
		}
		if err := s.query(c, r, ops[q]); err != nil {
			return
		}
	}
}

// opensWithValidate peeks at a new connection: does it start with 2.x's
// VALIDATE? Both 1.13's SET and VALIDATE have four more bytes after the
// type, so the peek does not wait on a 1.13 client's reply.
func opensWithValidate(r *bufio.Reader) bool {
	b, err := r.Peek(1)
	if err != nil || b[0] != 0 {
		return false
	}
	b, err = r.Peek(5)
	return err == nil && binary.LittleEndian.Uint32(b[1:]) == validateMagic
}

// write sends c's output as it is queued, until c is dropped.
func (s *StoreServer) write(c *storeConn) {
	defer s.wg.Done()
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		c.mu.Lock()
		out := c.out
		c.out = nil
		c.mu.Unlock()
		if _, err := out.WriteTo(c.c); err != nil {
			c.c.Close() // serve sees it and drops c
			return
		}
	}
}

// send queues b for c's writer.
func (c *storeConn) send(b []byte) {
	c.mu.Lock()
	c.out = append(c.out, b)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (s *StoreServer) drop(c *storeConn) {
	c.c.Close()
	close(c.done)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	s.unwait(c)
	for k, cs := range s.watchers {
		keep := cs[:0]
		for _, x := range cs {
			if x != c {
				keep = append(keep, x)
			}
		}
		if len(keep) == 0 {
			delete(s.watchers, k)
		} else {
			s.watchers[k] = keep
		}
	}
}

// unwait forgets c's waits (s.mu held).
func (s *StoreServer) unwait(c *storeConn) {
	for k, ws := range s.waiting {
		keep := ws[:0]
		for _, w := range ws {
			if w.c != c {
				keep = append(keep, w)
			}
		}
		if len(keep) == 0 {
			delete(s.waiting, k)
		} else {
			s.waiting[k] = keep
		}
	}
}

func readU64(r io.Reader) (uint64, error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

func readU32(r io.Reader) (uint32, error) {
	var b [4]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

func readBytes(r io.Reader) ([]byte, error) {
	n, err := readU64(r)
	if err != nil {
		return nil, err
	}
	if n > maxStoreValue {
		return nil, fmt.Errorf("store: a client sent a length of %d bytes", n)
	}
	b := make([]byte, n)
	_, err = io.ReadFull(r, b)
	return b, err
}

// readKeys reads a count and that many keys. The slice grows as keys
// arrive: a hostile count allocates no more than the bytes it sends.
func readKeys(r io.Reader) ([]string, error) {
	n, err := readU64(r)
	if err != nil {
		return nil, err
	}
	if n > maxStoreValue {
		return nil, fmt.Errorf("store: a client sent %d keys", n)
	}
	var keys []string
	for i := uint64(0); i < n; i++ {
		k, err := readBytes(r)
		if err != nil {
			return nil, err
		}
		keys = append(keys, string(k))
	}
	return keys, nil
}

func appendU64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }

func appendBytes(b, v []byte) []byte { return append(appendU64(b, uint64(len(v))), v...) }

// errMissing: a GET of a key that is not there. 1.13's server drops such a
// client; 2.x's (libuv) answers an empty value.
var errMissing = errors.New("store: get of a missing key")

func (s *StoreServer) query(c *storeConn, r *bufio.Reader, op storeOp) error {
	switch op {
	case opValidate:
		m, err := readU32(r)
		if err != nil {
			return err
		}
		if m != validateMagic {
			return fmt.Errorf("store: VALIDATE with %#x", m)
		}
		return nil
	case opPing:
		n, err := readU32(r)
		if err != nil {
			return err
		}
		c.send(binary.LittleEndian.AppendUint32(nil, n))
		return nil
	case opSet:
		key, err := readBytes(r)
		if err != nil {
			return err
		}
		val, err := readBytes(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.set(string(key), val)
		s.mu.Unlock()
		return nil
	case opMultiSet:
		n, err := readU64(r)
		if err != nil {
			return err
		}
		if n > maxStoreValue {
			return fmt.Errorf("store: a client sent %d keys", n)
		}
		var kvs [][]byte
		for i := uint64(0); i < 2*n; i++ {
			b, err := readBytes(r)
			if err != nil {
				return err
			}
			kvs = append(kvs, b)
		}
		s.mu.Lock()
		for i := 0; i < len(kvs); i += 2 {
			s.set(string(kvs[i]), kvs[i+1])
		}
		s.mu.Unlock()
		return nil
	case opCompareSet:
		key, err := readBytes(r)
		if err != nil {
			return err
		}
		expected, err := readBytes(r)
		if err != nil {
			return err
		}
		desired, err := readBytes(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		cur, had := s.kv[string(key)]
		var reply []byte
		switch {
		case !had && len(expected) == 0:
			s.kv[string(key)] = desired
			s.changed(string(key), watchCreated, nil, desired)
			reply = desired
		case !had:
			reply = expected // c10d answers so when the key is absent
		case string(cur) == string(expected):
			s.kv[string(key)] = desired
			s.changed(string(key), watchUpdated, cur, desired)
			reply = desired
		default:
			reply = cur
		}
		c.send(appendBytes(nil, reply))
		return nil
	case opGet, opMultiGet:
		keys := []string{""}
		if op == opGet {
			key, err := readBytes(r)
			if err != nil {
				return err
			}
			keys[0] = string(key)
		} else {
			var err error
			if keys, err = readKeys(r); err != nil {
				return err
			}
		}
		var reply []byte
		s.mu.Lock()
		for _, k := range keys {
			val, ok := s.kv[k]
			if !ok && !c.v2 {
				s.mu.Unlock()
				return errMissing
			}
			reply = appendBytes(reply, val)
		}
		s.mu.Unlock()
		c.send(reply)
		return nil
	case opAdd:
		key, err := readBytes(r)
		if err != nil {
			return err
		}
		d, err := readU64(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		old, had := s.kv[string(key)]
		v := int64(d)
		if had {
			n, err := strconv.ParseInt(string(old), 10, 64)
			if err != nil {
				return fmt.Errorf("store: add to a key that holds no integer: %w", err)
			}
			v += n
		}
		val := []byte(strconv.FormatInt(v, 10))
		s.kv[string(key)] = val
		s.changed(string(key), setKind(had), old, val)
		c.send(appendU64(nil, uint64(v)))
		return nil
	case opAppend:
		key, err := readBytes(r)
		if err != nil {
			return err
		}
		val, err := readBytes(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		old, had := s.kv[string(key)]
		s.kv[string(key)] = append(append([]byte(nil), old...), val...)
		kind := byte(watchAppended)
		if !had {
			kind = watchCreated
		}
		s.changed(string(key), kind, nil, val) // as 2.0's server tells watchers
		return nil
	case opCheck, opWait:
		keys, err := readKeys(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		missing := 0
		for _, k := range keys {
			if !s.present(k) {
				missing++
			}
		}
		if op == opCheck {
			if missing == 0 {
				c.send([]byte{checkReady})
			} else {
				c.send([]byte{checkNotReady})
			}
			return nil
		}
		if missing == 0 {
			c.send([]byte{stopWaiting})
			return nil
		}
		w := &storeWaiter{c: c, missing: missing}
		for _, k := range keys {
			if !s.present(k) {
				s.waiting[k] = append(s.waiting[k], w)
			}
		}
		return nil
	case opCancelWait:
		s.mu.Lock()
		defer s.mu.Unlock()
		s.unwait(c)
		c.send([]byte{waitCanceled})
		return nil
	case opNumKeys:
		s.mu.Lock()
		n := len(s.kv)
		s.mu.Unlock()
		c.send(appendU64(nil, uint64(n)))
		return nil
	case opListKeys:
		s.mu.Lock()
		keys := make([]string, 0, len(s.kv))
		for k := range s.kv {
			keys = append(keys, k)
		}
		s.mu.Unlock()
		sort.Strings(keys)
		reply := appendU64(nil, uint64(len(keys)))
		for _, k := range keys {
			reply = appendBytes(reply, []byte(k))
		}
		c.send(reply)
		return nil
	case opDelete:
		key, err := readBytes(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		old, had := s.kv[string(key)]
		var n uint64
		if had {
			delete(s.kv, string(key))
			s.changed(string(key), watchDeleted, old, nil)
			n = 1
		}
		c.send(appendU64(nil, n))
		return nil
	case opWatch:
		key, err := readBytes(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.watchers[string(key)] = append(s.watchers[string(key)], c)
		s.mu.Unlock()
		c.send([]byte{watchRegistered})
		return nil
	case opQueuePush:
		key, err := readBytes(r)
		if err != nil {
			return err
		}
		val, err := readBytes(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.queues[string(key)] = append(s.queues[string(key)], val)
		s.wakeOne(string(key))
		s.mu.Unlock()
		return nil
	case opQueuePop:
		key, err := readBytes(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		q := s.queues[string(key)]
		reply := appendU64(nil, uint64(len(q)))
		if len(q) > 0 {
			reply = appendBytes(reply, q[0])
			q[0] = nil
			if len(q) == 1 {
				delete(s.queues, string(key))
			} else {
				s.queues[string(key)] = q[1:]
			}
		}
		s.mu.Unlock()
		c.send(reply)
		return nil
	case opQueueLen:
		key, err := readBytes(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		n := len(s.queues[string(key)])
		s.mu.Unlock()
		c.send(appendU64(nil, uint64(n)))
		return nil
	}
	return fmt.Errorf("store: unknown operation %d", op)
}

// present says whether key is set, or is a queue with values (a 2.x client
// waits for a queue's key before it pops). s.mu held.
func (s *StoreServer) present(key string) bool {
	if _, ok := s.kv[key]; ok {
		return true
	}
	return len(s.queues[key]) > 0
}

// set stores val under key (s.mu held).
func (s *StoreServer) set(key string, val []byte) {
	old, had := s.kv[key]
	s.kv[key] = val
	s.changed(key, setKind(had), old, val)
}

func setKind(had bool) byte {
	if had {
		return watchUpdated
	}
	return watchCreated
}

// changed wakes the clients waiting for key (unless it was deleted) and
// tells its watchers what happened (s.mu held).
func (s *StoreServer) changed(key string, kind byte, old, val []byte) {
	if kind != watchDeleted {
		if ws, ok := s.waiting[key]; ok {
			delete(s.waiting, key)
			for _, w := range ws {
				w.missing--
				if w.missing == 0 {
					w.c.send([]byte{stopWaiting})
				}
			}
		}
	}
	cs := s.watchers[key]
	if len(cs) == 0 {
		return
	}
	msg := appendBytes(appendBytes(appendBytes([]byte{kind}, []byte(key)), old), val)
	for _, c := range cs {
		c.send(msg)
	}
}

// wakeOne releases the first client waiting for key whose wait a pushed
// value completes: one value, one popper (s.mu held).
func (s *StoreServer) wakeOne(key string) {
	ws := s.waiting[key]
	for len(ws) > 0 {
		w := ws[0]
		ws = ws[1:]
		w.missing--
		if w.missing == 0 {
			w.c.send([]byte{stopWaiting})
			break
		}
	}
	if len(ws) == 0 {
		delete(s.waiting, key)
	} else {
		s.waiting[key] = ws
	}
}
