package distributed

/*
#include <stdlib.h>
#include "dist.h"
*/
import "C"

import (
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"time"
	"unsafe"
)

// Store is a c10d key-value store, where ranks meet (rendezvous): a client
// of a TCPStore server (NewTCPStore), a FileStore (NewFileStore) or a
// prefix of another store (Prefix). Safe for concurrent use.
type Store struct {
	mu      sync.Mutex
	h       C.tfd_store
	timeout time.Duration
	base    *Store // kept alive by a prefix store
}

// DefaultTimeout bounds rendezvous and collectives when Options.Timeout is
// zero. PyTorch's default is 30 minutes; a run that waits that long for a
// dead rank is not what a user wants to see, and a rank that dies closes
// its sockets, which the others see at once (ErrPeer) whatever the timeout.
const DefaultTimeout = 5 * time.Minute

func newStore(h C.tfd_store, timeout time.Duration, base *Store) *Store {
	s := &Store{h: h, timeout: timeout, base: base}
	runtime.SetFinalizer(s, (*Store).Close)
	return s
}

// NewTCPStore connects to the TCPStore server at host:port (a StoreServer,
// torchrun's agent store, or a Python rank 0's), waiting up to timeout for
// it to accept. world is the number of clients that will connect (0:
// unknown).
func NewTCPStore(host string, port, world int, timeout time.Duration) (*Store, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ch, free := cstr(host)
	defer free()
	var h C.tfd_store
	if err := check("store", C.tfd_tcp_store(ch, C.int32_t(port), C.int32_t(world), ms(timeout), &h)); err != nil {
		return nil, fmt.Errorf("connecting to the store at %s: %w", net.JoinHostPort(host, strconv.Itoa(port)), err)
	}
	return newStore(h, timeout, nil), nil
}

// NewFileStore opens a FileStore at path shared by world processes (on one
// machine, or a shared file system). The file must not exist when the
// first process opens it, and the last to close it removes it.
func NewFileStore(path string, world int, timeout time.Duration) (*Store, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	cp, free := cstr(path)
	defer free()
	var h C.tfd_store
	if err := check("file store", C.tfd_file_store(cp, C.int32_t(world), ms(timeout), &h)); err != nil {
		return nil, err
	}
	return newStore(h, timeout, nil), nil
}

// Prefix returns a view of s whose keys live under "prefix/" (c10d's
// PrefixStore).
func (s *Store) Prefix(prefix string) (*Store, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h == nil {
		return nil, &Error{Op: "store", Msg: "store closed", Rank: -1}
	}
	cp, free := cstr(prefix)
	defer free()
	var h C.tfd_store
	if err := check("store", C.tfd_prefix_store(cp, s.h, &h)); err != nil {
		return nil, err
	}
	return newStore(h, s.timeout, s), nil
}

// Close releases the store (the connection when it is the last reference).
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h != nil {
		C.tfd_store_free(s.h)
		s.h = nil
	}
	return nil
}

func (s *Store) handle() (C.tfd_store, error) {
	if s.h == nil {
		return nil, &Error{Op: "store", Msg: "store closed", Rank: -1}
	}
	return s.h, nil
}

// Set stores value under key.
func (s *Store) Set(key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.handle()
	if err != nil {
		return err
	}
	ck, free := cstr(key)
	defer free()
	var p unsafe.Pointer
	if len(value) > 0 {
		p = C.CBytes(value)
		defer C.free(p)
	}
	return check("store set", C.tfd_store_set(h, ck, p, C.size_t(len(value))))
}

// Get waits (up to the store's timeout) for key and returns its value.
func (s *Store) Get(key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.handle()
	if err != nil {
		return nil, err
	}
	ck, free := cstr(key)
	defer free()
	var p unsafe.Pointer
	var n C.size_t
	if err := check("store get", C.tfd_store_get(h, ck, &p, &n)); err != nil {
		return nil, err
	}
	defer C.free(p)
	return C.GoBytes(p, C.int(n)), nil
}

// Add adds delta to the integer under key (0 when absent) and returns the
// result.
func (s *Store) Add(key string, delta int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.handle()
	if err != nil {
		return 0, err
	}
	ck, free := cstr(key)
	defer free()
	var out C.int64_t
	err = check("store add", C.tfd_store_add(h, ck, C.int64_t(delta), &out))
	return int64(out), err
}

// barrier is torch.distributed's store-based barrier: each rank adds 1 to
// key and polls until all world have.
func (s *Store) barrier(key string, world int, timeout time.Duration) error {
	if _, err := s.Add(key, 1); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		n, err := s.Add(key, 0)
		if err != nil {
			return err
		}
		if n >= int64(world) {
			return nil
		}
		if time.Now().After(deadline) {
			return &Error{Op: "rendezvous", Kind: KindTimeout, Rank: -1,
				Msg: fmt.Sprintf("%d of %d ranks arrived within %v", n, world, timeout)}
		}
		time.Sleep(10 * time.Millisecond)
	}
}
