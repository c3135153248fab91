package amp

// ForceHostUpdate makes the scale's update take its host arithmetic on the
// CPU (on) or the fused kernel where libtorch has one (off), and returns
// the undo.
func ForceHostUpdate(on bool) (undo func()) {
	prev := hostUpdate.Swap(on)
	return func() { hostUpdate.Store(prev) }
}

// CPUUpdateKernel reports whether this libtorch has a CPU kernel for
// _amp_update_scale_.
func CPUUpdateKernel() bool { return cpuUpdateKernel() }
