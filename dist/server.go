package dist

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
)

// StoreServer is a TCPStore server written in Go: it speaks the wire
// protocol of libtorch 1.13's c10d::TCPStore (its clients are c10d's
// TCPStore in Go ranks and in Python ranks alike), and it listens on the
// one address it is given — c10d's own server listens on every interface
// of the machine. `torchfit launch` hosts one (torchrun's agent store), and
// so does rank 0 when no launcher does.
//
// The protocol has no authentication: anyone who reaches the port can read
// and change the rendezvous (and then the ranks' peers). Bind it to
// loopback, or to an interface of a trusted network only.
type StoreServer struct {
	ln net.Listener

	mu       sync.Mutex
	kv       map[string][]byte
	waiting  map[string][]*storeWaiter
	watchers map[string][]*storeConn
	conns    map[*storeConn]struct{}
	closed   bool
	wg       sync.WaitGroup
}

type storeConn struct {
	c  net.Conn
	wm sync.Mutex // serialises writes (replies, wake-ups, watch events)
}

type storeWaiter struct {
	c       *storeConn
	missing int
}

// Query types and replies of c10d's TCPStore (libtorch 1.13).
const (
	qSet        = 0
	qCompareSet = 1
	qGet        = 2
	qAdd        = 3
	qCheck      = 4
	qWait       = 5
	qGetNumKeys = 6
	qWatchKey   = 7
	qDeleteKey  = 8

	checkReady    = 0
	checkNotReady = 1
	stopWaiting   = 0

	watchUpdated    = 0
	watchCreated    = 1
	watchDeleted    = 2
	watchRegistered = 3
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
	s := &StoreServer{ln: ln, kv: map[string][]byte{}, waiting: map[string][]*storeWaiter{},
		watchers: map[string][]*storeConn{}, conns: map[*storeConn]struct{}{}}
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
		sc := &storeConn{c: c}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[sc] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(sc)
	}
}

// serve answers one client's queries until it disconnects or sends
// something malformed (c10d's server closes such a connection too).
func (s *StoreServer) serve(c *storeConn) {
	defer s.wg.Done()
	defer s.drop(c)
	r := bufio.NewReader(c.c)
	for {
		q, err := r.ReadByte()
		if err != nil {
			return
		}
		if err := s.query(c, r, q); err != nil {
			return
		}
	}
}

func (s *StoreServer) drop(c *storeConn) {
	c.c.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
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

func readU64(r io.Reader) (uint64, error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
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

func appendU64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }

func appendBytes(b, v []byte) []byte { return append(appendU64(b, uint64(len(v))), v...) }

func (c *storeConn) write(b []byte) error {
	c.wm.Lock()
	defer c.wm.Unlock()
	_, err := c.c.Write(b)
	return err
}

func (s *StoreServer) query(c *storeConn, r *bufio.Reader, q byte) error {
	switch q {
	case qSet:
		key, err := readBytes(r)
		if err != nil {
			return err
		}
		val, err := readBytes(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		old, had := s.kv[string(key)]
		s.kv[string(key)] = val
		s.changed(string(key), old, val, had, false)
		s.mu.Unlock()
		return nil
	case qCompareSet:
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
		cur, had := s.kv[string(key)]
		var reply []byte
		switch {
		case !had && len(expected) == 0:
			s.kv[string(key)] = desired
			s.changed(string(key), nil, desired, false, false)
			reply = desired
		case !had:
			reply = expected // c10d answers so when the key is absent
		case string(cur) == string(expected):
			s.kv[string(key)] = desired
			s.changed(string(key), cur, desired, true, false)
			reply = desired
		default:
			reply = cur
		}
		s.mu.Unlock()
		return c.write(appendBytes(nil, reply))
	case qGet:
		key, err := readBytes(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		val, ok := s.kv[string(key)]
		s.mu.Unlock()
		if !ok {
			return errors.New("store: get of a missing key") // c10d's server drops the client too
		}
		return c.write(appendBytes(nil, val))
	case qAdd:
		key, err := readBytes(r)
		if err != nil {
			return err
		}
		d, err := readU64(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		old, had := s.kv[string(key)]
		v := int64(d)
		if had {
			n, err := strconv.ParseInt(string(old), 10, 64)
			if err != nil {
				s.mu.Unlock()
				return fmt.Errorf("store: add to a key that holds no integer")
			}
			v += n
		}
		val := []byte(strconv.FormatInt(v, 10))
		s.kv[string(key)] = val
		s.changed(string(key), old, val, had, false)
		s.mu.Unlock()
		return c.write(appendU64(nil, uint64(v)))
	case qCheck, qWait:
		n, err := readU64(r)
		if err != nil {
			return err
		}
		if n > maxStoreValue {
			return fmt.Errorf("store: a client asked for %d keys", n)
		}
		keys := make([]string, n)
		for i := range keys {
			k, err := readBytes(r)
			if err != nil {
				return err
			}
			keys[i] = string(k)
		}
		s.mu.Lock()
		missing := 0
		for _, k := range keys {
			if _, ok := s.kv[k]; !ok {
				missing++
			}
		}
		if q == qCheck {
			s.mu.Unlock()
			if missing == 0 {
				return c.write([]byte{checkReady})
			}
			return c.write([]byte{checkNotReady})
		}
		if missing == 0 {
			s.mu.Unlock()
			return c.write([]byte{stopWaiting})
		}
		w := &storeWaiter{c: c, missing: missing}
		for _, k := range keys {
			if _, ok := s.kv[k]; !ok {
				s.waiting[k] = append(s.waiting[k], w)
			}
		}
		s.mu.Unlock()
		return nil
	case qGetNumKeys:
		s.mu.Lock()
		n := len(s.kv)
		s.mu.Unlock()
		return c.write(appendU64(nil, uint64(n)))
	case qDeleteKey:
		key, err := readBytes(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		old, had := s.kv[string(key)]
		delete(s.kv, string(key))
		if had {
			s.changed(string(key), old, nil, true, true)
		}
		s.mu.Unlock()
		var n uint64
		if had {
			n = 1
		}
		return c.write(appendU64(nil, n))
	case qWatchKey:
		key, err := readBytes(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.watchers[string(key)] = append(s.watchers[string(key)], c)
		s.mu.Unlock()
		return c.write([]byte{watchRegistered})
	}
	return fmt.Errorf("store: unknown query type %d", q)
}

// changed wakes the clients waiting for key and tells its watchers (s.mu
// held). Replies are written by goroutines: a slow client must not stall
// the server.
func (s *StoreServer) changed(key string, old, val []byte, had, deleted bool) {
	if !deleted {
		if ws, ok := s.waiting[key]; ok {
			delete(s.waiting, key)
			for _, w := range ws {
				w.missing--
				if w.missing == 0 {
					go w.c.write([]byte{stopWaiting})
				}
			}
		}
	}
	cs := s.watchers[key]
	if len(cs) == 0 {
		return
	}
	kind := byte(watchUpdated)
	switch {
	case deleted:
		kind = watchDeleted
	case !had:
		kind = watchCreated
	}
	msg := appendBytes(appendBytes(appendBytes([]byte{kind}, []byte(key)), old), val)
	for _, c := range cs {
		go c.write(msg)
	}
}
