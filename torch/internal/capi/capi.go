// Package capi is the cgo boundary of torchfit: the C++ shim over libtorch
// (capi.h, *.cc) and Go functions that call it with Go types.
//
// It lives apart from package torch so that editing torch's Go code does not
// recompile the C++ (Go rebuilds every C++ file of a package when any of its
// files changes). Nothing here panics; every call returns the shim's error.
package capi

/*
#cgo CXXFLAGS: -std=c++17 -O2 -fPIC -Wno-deprecated-declarations -Wno-unused-parameter
#cgo LDFLAGS: -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10 -Wl,--as-needed -lstdc++
#cgo noescape tf_op_call
#cgo nocallback tf_op_call
#cgo nocallback tf_scope_swap
#cgo nocallback tf_scope_current
#cgo noescape tf_mem_stats
#cgo noescape tf_tensor_info
#cgo nocallback tf_tensor_info
#cgo noescape tf_tensor_from_data
#cgo noescape tf_tensor_copy_to
#include <stdlib.h>
#include "capi.h"
*/
import "C"

import (
	"strings"
	"time"
	"unsafe"
)

// Err is an error reported by the shim.
type Err struct {
	OOM     bool   // libtorch ran out of memory
	Host    bool   // out of host memory, no size known (capi.h: "H:"); OOM too
	Backend bool   // a backend fault (capi.h: "B:"); the process is unsafe
	Msg     string // libtorch's message, without its C++ backtrace
}

func (e *Err) Error() string { return e.Msg }

func check(e C.tf_err) error {
	if e == nil {
		return nil
	}
	s := C.GoString(e)
	C.tf_free_error(e)
	err := &Err{Msg: s}
	if len(s) >= 2 && s[1] == ':' {
		err.OOM = s[0] == 'O' || s[0] == 'H'
		err.Host = s[0] == 'H'
		err.Backend = s[0] == 'B'
		err.Msg = s[2:]
	}
	err.Msg = strings.TrimSpace(err.Msg)
	return err
}

// Check converts an error a shim-shaped function of another cgo package
// returned (a tf_err, NULL or a malloc'd string) and frees it.
func Check(e unsafe.Pointer) error { return check(C.tf_err(e)) }

// Tensor is an owning reference to a libtorch tensor.
type Tensor = C.tf_tensor

// Op is a resolved operator.
type Op = C.tf_op

// Value kinds (capi.h).
const (
	KDefault = C.TF_DEFAULT
	KNone    = C.TF_NONE
	KTensor  = C.TF_TENSOR
	KInt     = C.TF_INT
	KDouble  = C.TF_DOUBLE
	KBool    = C.TF_BOOL
	KInts    = C.TF_INTS
	KDoubles = C.TF_DOUBLES
	KTensors = C.TF_TENSORS
	KString  = C.TF_STRING
	KDevice  = C.TF_DEVICE
)

// Val mirrors tf_val. P is a C pointer carried as an integer (see capi.h).
type Val struct {
	Kind int32
	N    int32
	I    int64
	D    float64
	P    uintptr
}

// TensorVal returns a value holding tensor handle t.
func TensorVal(t Tensor) Val { return Val{Kind: KTensor, P: uintptr(unsafe.Pointer(t))} }

// Tensor returns the tensor handle a TF_TENSOR value carries.
func (v Val) Tensor() Tensor { return *(*Tensor)(unsafe.Pointer(&v.P)) }

// FindOp resolves an operator by name and overload.
func FindOp(name, overload string) (Op, error) {
	cn, co := C.CString(name), C.CString(overload)
	defer C.free(unsafe.Pointer(cn))
	defer C.free(unsafe.Pointer(co))
	var op Op
	err := check(C.tf_op_find(cn, co, &op))
	if err == nil {
		if overload != "" {
			name += "." + overload
		}
		nameOp(op, name)
	}
	return op, err
}

// Schema returns the operator's schema text.
func Schema(op Op) string {
	var s *C.char
	if check(C.tf_op_schema(op, &s)) != nil {
		return "?"
	}
	defer C.free(unsafe.Pointer(s))
	return C.GoString(s)
}

// Typed reports whether op has the typed fast path (ops.cc): an operator
// of tensors, optional tensors and Scalars returning one tensor.
func Typed(op Op) bool {
	var out C.int32_t
	if err := check(C.tf_op_typed(op, &out)); err != nil {
		panic(err)
	}
	return out != 0
}

// SetTypedCalls switches the typed fast path on or off (every call boxed;
// TORCHFIT_OPS=boxed starts with it off) and returns the setting before.
// Both paths reach the same kernels through the same dispatcher.
func SetTypedCalls(on bool) bool {
	var in, was C.int32_t
	if on {
		in = 1
	}
	if err := check(C.tf_ops_set_typed(in, &was)); err != nil {
		panic(err)
	}
	return was != 0
}

// TypedHere returns how many typed calls the calling OS thread has made
// (lock the goroutine to its thread to count its calls).
func TypedHere() uint64 {
	var out C.uint64_t
	if err := check(C.tf_ops_typed_here(&out)); err != nil {
		panic(err)
	}
	return uint64(out)
}

// Call runs op. outs receives up to len(outs) results; it returns how many
// the op produced.
func Call(op Op, args []Val, arena []int64, outs []Val) (n int, scope uint64, err error) {
	var a *C.tf_val
	if len(args) > 0 {
		a = (*C.tf_val)(unsafe.Pointer(&args[0]))
	}
	var ar *C.int64_t
	if len(arena) > 0 {
		ar = (*C.int64_t)(unsafe.Pointer(&arena[0]))
	}
	var o *C.tf_val
	if len(outs) > 0 {
		o = (*C.tf_val)(unsafe.Pointer(&outs[0]))
	}
	var cn C.int32_t
	var cs C.uint64_t
	if statsOn.Load() {
		defer countOp(op, time.Now())
	}
	err = check(C.tf_op_call(op, a, C.int32_t(len(args)), ar, o, C.int32_t(len(outs)), &cn, &cs))
	return int(cn), uint64(cs), err
}

// ScopeSwap sets the calling thread's scope and returns the previous one.
func ScopeSwap(s uint64) uint64 {
	if statsOn.Load() {
		defer count("(scope swap)", time.Now())
	}
	return uint64(C.tf_scope_swap(C.uint64_t(s)))
}

// CurrentScope returns the calling thread's scope.
func CurrentScope() uint64 {
	if statsOn.Load() {
		defer count("(current scope)", time.Now())
	}
	return uint64(C.tf_scope_current())
}

// TensorList converts a returned TF_TENSORS value into handles and frees the C array.
func TensorList(v Val) []Tensor {
	if v.P == 0 {
		return nil
	}
	p := *(*unsafe.Pointer)(unsafe.Pointer(&v.P))
	arr := unsafe.Slice((*Tensor)(p), int(v.N))
	out := make([]Tensor, len(arr))
	copy(out, arr)
	C.free(p)
	return out
}

// Free releases a tensor reference.
func Free(t Tensor) {
	if statsOn.Load() {
		defer count("(free)", time.Now())
	}
	C.tf_tensor_free(t)
}

// CloneHandle returns a second reference to the same tensor.
func CloneHandle(t Tensor) (Tensor, error) {
	if statsOn.Load() {
		defer count("(new reference)", time.Now())
	}
	var out Tensor
	return out, check(C.tf_tensor_clone_handle(t, &out))
}

// FromData copies data (nbytes at ptr) into a new CPU tensor.
func FromData(ptr unsafe.Pointer, nbytes int, shape []int64, dtype int32) (Tensor, error) {
	if statsOn.Load() {
		defer count("(from data)", time.Now())
	}
	var sp *C.int64_t
	if len(shape) > 0 {
		sp = (*C.int64_t)(unsafe.Pointer(&shape[0]))
	}
	var out Tensor
	return out, check(C.tf_tensor_from_data(ptr, C.size_t(nbytes), sp, C.int32_t(len(shape)), C.int32_t(dtype), &out))
}

// CopyTo copies the tensor's elements into dst.
func CopyTo(t Tensor, dst unsafe.Pointer, nbytes int) error {
	if statsOn.Load() {
		defer count("(copy out)", time.Now())
	}
	return check(C.tf_tensor_copy_to(t, dst, C.size_t(nbytes)))
}

// Info mirrors tf_info.
type Info struct {
	Defined, DType, NDim, DeviceType, DeviceIndex, RequiresGrad, IsLeaf, IsContiguous int32
	Numel, NBytes                                                                     int64
}

// MaxDims is the most dimensions Describe reports.
const MaxDims = 16

// Describe returns the tensor's metadata and shape.
func Describe(t Tensor, shape, strides *[MaxDims]int64) (Info, error) {
	if statsOn.Load() {
		defer count("(tensor info)", time.Now())
	}
	var info Info
	var st *C.int64_t
	if strides != nil {
		st = (*C.int64_t)(unsafe.Pointer(&strides[0]))
	}
	err := check(C.tf_tensor_info(t, (*C.tf_info)(unsafe.Pointer(&info)), (*C.int64_t)(unsafe.Pointer(&shape[0])), st, MaxDims))
	return info, err
}

// SameTensor reports whether two handles refer to the same tensor.
func SameTensor(a, b Tensor) (bool, error) {
	var s C.int32_t
	err := check(C.tf_tensor_same(a, b, &s))
	return s != 0, err
}

// DataPtr returns the address of the tensor's first element.
func DataPtr(t Tensor) (uintptr, error) {
	var p C.uintptr_t
	err := check(C.tf_tensor_data_ptr(t, &p))
	return uintptr(p), err
}

func b32(b bool) C.int32_t {
	if b {
		return 1
	}
	return 0
}

// Backward runs the autograd engine from t.
func Backward(t, grad Tensor, retain, create bool) error {
	if statsOn.Load() {
		defer count("(backward)", time.Now())
	}
	return check(C.tf_backward(t, grad, b32(retain), b32(create)))
}

// Grad returns t's gradient (nil when none).
func Grad(t Tensor) (Tensor, error) {
	if statsOn.Load() {
		defer count("(grad)", time.Now())
	}
	var out Tensor
	return out, check(C.tf_grad(t, &out))
}

// SetGrad replaces t's gradient (nil clears it).
func SetGrad(t, g Tensor) error {
	if statsOn.Load() {
		defer count("(set grad)", time.Now())
	}
	return check(C.tf_set_grad(t, g))
}

// SetRequiresGrad sets t's requires_grad flag.
func SetRequiresGrad(t Tensor, on bool) error { return check(C.tf_set_requires_grad(t, b32(on))) }

// AutogradGrad computes the gradients of outputs with respect to inputs.
func AutogradGrad(outputs, gradOutputs, inputs []Tensor, retain, create, allowUnused bool) ([]Tensor, error) {
	grads := make([]Tensor, len(inputs))
	var gout *C.tf_tensor
	if len(gradOutputs) > 0 {
		gout = cTensors(gradOutputs)
		defer C.free(unsafe.Pointer(gout))
	}
	outs := cTensors(outputs)
	defer C.free(unsafe.Pointer(outs))
	ins := cTensors(inputs)
	defer C.free(unsafe.Pointer(ins))
	res := cTensors(grads)
	defer C.free(unsafe.Pointer(res))
	err := check(C.tf_autograd_grad(outs, C.int32_t(len(outputs)), gout, ins, C.int32_t(len(inputs)),
		b32(retain), b32(create), b32(allowUnused), res))
	copy(grads, unsafe.Slice((*Tensor)(unsafe.Pointer(res)), len(grads)))
	return grads, err
}

// cTensors copies handles into C memory (C memory may hold them freely).
func cTensors(ts []Tensor) *C.tf_tensor {
	n := len(ts)
	if n == 0 {
		n = 1
	}
	p := (*C.tf_tensor)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(Tensor(nil)))))
	copy(unsafe.Slice((*Tensor)(unsafe.Pointer(p)), n), ts)
	return p
}

// GradMode sets the calling thread's grad mode (set < 0 only queries) and
// returns the previous value.
func GradMode(set int) (bool, error) {
	if statsOn.Load() {
		defer count("(grad mode)", time.Now())
	}
	var prev C.int32_t
	err := check(C.tf_grad_mode(C.int32_t(set), &prev))
	return prev != 0, err
}

// InferenceModeEnter enters inference mode on the calling thread.
func InferenceModeEnter() (unsafe.Pointer, error) {
	var g unsafe.Pointer
	return g, check(C.tf_inference_mode_enter(&g))
}

// InferenceModeExit leaves the inference mode entered by guard.
func InferenceModeExit(g unsafe.Pointer) error { return check(C.tf_inference_mode_exit(g)) }

// ManualSeed seeds every generator.
func ManualSeed(seed uint64) error { return check(C.tf_manual_seed(C.uint64_t(seed))) }

// RNGState returns the default CPU generator's state.
func RNGState() (Tensor, error) {
	var out Tensor
	return out, check(C.tf_rng_get_state(&out))
}

// SetRNGState restores the default CPU generator's state.
func SetRNGState(t Tensor) error { return check(C.tf_rng_set_state(t)) }

// SetNumThreads sets libtorch's intra-op thread count.
func SetNumThreads(n int) error { return check(C.tf_set_num_threads(C.int32_t(n))) }

// RNGSnapshot is the random generators' states (CPU and CUDA).
type RNGSnapshot = unsafe.Pointer

// TakeRNG snapshots every default generator.
func TakeRNG() (RNGSnapshot, error) {
	var p unsafe.Pointer
	err := check(C.tf_rng_snapshot_take(&p))
	return p, err
}

// ApplyRNG restores a snapshot.
func ApplyRNG(s RNGSnapshot) error { return check(C.tf_rng_snapshot_apply(s)) }

// FreeRNG releases a snapshot.
func FreeRNG(s RNGSnapshot) { C.tf_rng_snapshot_free(s) }

// OneDNNCacheCapacity returns oneDNN's primitive cache capacity (-1 when
// this libtorch exposes no oneDNN API) and, when set >= 0, changes it.
func OneDNNCacheCapacity(set int) (int, error) {
	var prev C.int32_t
	err := check(C.tf_onednn_cache_capacity(C.int32_t(set), &prev))
	return int(prev), err
}

// OneDNNVersion returns the linked oneDNN's version (-1s when hidden).
func OneDNNVersion() (major, minor, patch int) {
	var a, b, c C.int32_t
	if check(C.tf_onednn_version(&a, &b, &c)) != nil {
		return -1, -1, -1
	}
	return int(a), int(b), int(c)
}

// ThreadProbe reports OpenMP's max threads on a new OS thread before and
// after its first shim call (-1 without OpenMP).
func ThreadProbe() (before, after int, err error) {
	var b, a C.int32_t
	err = check(C.tf_thread_probe(&b, &a))
	return int(b), int(a), err
}

// InjectFault arms a C++ exception of kind (capi.h) in the after-th op call.
func InjectFault(kind int, after int64) error {
	return check(C.tf_inject_fault(C.int32_t(kind), C.int64_t(after)))
}

// ExhaustionProbe returns the bytes a std::bad_alloc's classification
// tries to allocate (capi.h) and sets it to set when set > 0.
func ExhaustionProbe(set int64) (prev int64, err error) {
	var p C.int64_t
	err = check(C.tf_exhaustion_probe(C.int64_t(set), &p))
	return int64(p), err
}

// NumThreads returns libtorch's intra-op thread count.
func NumThreads() int {
	var n C.int32_t
	if check(C.tf_get_num_threads(&n)) != nil {
		return 0
	}
	return int(n)
}

// Version returns the libtorch version the shim was compiled against.
func Version() (major, minor, patch int) {
	var a, b, c C.int32_t
	C.tf_version(&a, &b, &c)
	return int(a), int(b), int(c)
}

// CUDADeviceCount returns the number of CUDA devices libtorch sees.
func CUDADeviceCount() int {
	var n C.int32_t
	if check(C.tf_cuda_device_count(&n)) != nil {
		return 0
	}
	return int(n)
}

// CUDASynchronize waits for all work on a CUDA device.
func CUDASynchronize(device int) error { return check(C.tf_cuda_synchronize(C.int32_t(device))) }

// MemStats mirrors tf_memstats.
type MemStats struct {
	Allocated, PeakAllocated, Reserved, PeakReserved int64
	NumBlocks, NumAllocs, NumOOMs, Limit             int64
	LastOOMRequest, DeviceTotal, DeviceFree          int64
	Counting                                         int32
	_                                                int32
}

// MemoryStats reads the allocator's counters (deviceType 0: CPU, 1: CUDA).
func MemoryStats(deviceType, device int) (MemStats, error) {
	var s MemStats
	err := check(C.tf_mem_stats(C.int32_t(deviceType), C.int32_t(device), (*C.tf_memstats)(unsafe.Pointer(&s))))
	return s, err
}

// ResetPeak resets the peak counters to the current values.
func ResetPeak(deviceType, device int) error {
	return check(C.tf_mem_reset_peak(C.int32_t(deviceType), C.int32_t(device)))
}

// StartMemTrace starts recording the CPU counting allocator's events.
func StartMemTrace() error { return check(C.tf_mem_trace(1, nil, nil)) }

// StopMemTrace stops the recording and returns its events: +bytes for an
// allocation, -bytes for a free, in order.
func StopMemTrace() ([]int64, error) {
	var p *C.int64_t
	var n C.int64_t
	if err := check(C.tf_mem_trace(0, &p, &n)); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	defer C.free(unsafe.Pointer(p))
	return append([]int64(nil), unsafe.Slice((*int64)(unsafe.Pointer(p)), int(n))...), nil
}

// SetLimit caps an allocator: bytes > 0 absolute, otherwise fraction of device memory.
func SetLimit(deviceType, device int, bytes int64, fraction float64) error {
	return check(C.tf_mem_set_limit(C.int32_t(deviceType), C.int32_t(device), C.int64_t(bytes), C.double(fraction)))
}

// EmptyCache releases the CUDA allocator's unused cached blocks; false on CPU builds.
func EmptyCache() (bool, error) {
	var done C.int32_t
	err := check(C.tf_mem_empty_cache(&done))
	return done != 0, err
}

// ClearWorkspaces frees the cuBLAS/cuBLASLt workspaces; false when there are none to free.
func ClearWorkspaces() (bool, error) {
	var done C.int32_t
	err := check(C.tf_mem_clear_workspaces(&done))
	return done != 0, err
}

// Build mirrors tf_build with the loaded library's configuration and path.
type Build struct {
	HeaderMajor, HeaderMinor, HeaderPatch int
	CXX11ABI                              int
	CUDATag                               bool
	Config                                string // at::show_config() of the loaded library
	Library                               string // the file libtorch_cpu was loaded from
}

func takeString(p *C.char) string {
	if p == nil {
		return ""
	}
	s := C.GoString(p)
	C.free(unsafe.Pointer(p))
	return s
}

// BuildInfo reports what the shim was compiled against and what is loaded.
func BuildInfo() (Build, error) {
	var b C.tf_build
	var cfg, lib *C.char
	if err := check(C.tf_build_info(&b, &cfg, &lib)); err != nil {
		return Build{}, err
	}
	return Build{
		HeaderMajor: int(b.header_major), HeaderMinor: int(b.header_minor), HeaderPatch: int(b.header_patch),
		CXX11ABI: int(b.cxx11_abi), CUDATag: b.cuda_tag != 0, Config: takeString(cfg), Library: takeString(lib),
	}, nil
}

// CUDAInfo mirrors tf_cudainfo.
type CUDAInfo struct {
	Hooks              bool // libtorch_cuda is loaded
	DeviceCount        int
	CUDAError          int
	ErrorText          string
	DriverVersion      int
	ExpandableSegments int // 1 on, 0 off, -1 unknown
	AllocatorSettings  string
	CUDARTVersion      int64
	CuDNNVersion       int64
	NCCLVersion        int64
}

// CUDAInfoGet reports libtorch's CUDA libraries and the runtime's view.
func CUDAInfoGet() (CUDAInfo, error) {
	var c C.tf_cudainfo
	var e, conf *C.char
	if err := check(C.tf_cuda_info(&c, &e, &conf)); err != nil {
		return CUDAInfo{}, err
	}
	return CUDAInfo{
		Hooks: c.hooks != 0, DeviceCount: int(c.device_count), CUDAError: int(c.cuda_error), ErrorText: takeString(e),
		DriverVersion: int(c.driver_version), ExpandableSegments: int(c.expandable_segments),
		AllocatorSettings: takeString(conf), CUDARTVersion: int64(c.cudart_version),
		CuDNNVersion: int64(c.cudnn_version), NCCLVersion: int64(c.nccl_version),
	}, nil
}

// CUDADevice mirrors tf_cudadevice.
type CUDADevice struct {
	Name                          string
	Major, Minor, Multiprocessors int
	Total, Free                   int64
}

// CUDADeviceProps reports device n's properties and free memory.
func CUDADeviceProps(n int) (CUDADevice, error) {
	var d C.tf_cudadevice
	if err := check(C.tf_cuda_device_props(C.int32_t(n), &d)); err != nil {
		return CUDADevice{}, err
	}
	return CUDADevice{
		Name: C.GoString(&d.name[0]), Major: int(d.major), Minor: int(d.minor), Multiprocessors: int(d.multiprocessors),
		Total: int64(d.total), Free: int64(d.free),
	}, nil
}

// LibraryVersion reads the version of the libtorch whose libtorch_cpu is at
// path and why the shim could not use it ("" when it could).
func LibraryVersion(path string) (version, mismatch string, err error) {
	c := C.CString(path)
	defer C.free(unsafe.Pointer(c))
	var v, m *C.char
	if err := check(C.tf_library_version(c, &v, &m)); err != nil {
		return "", "", err
	}
	return takeString(v), takeString(m), nil
}
