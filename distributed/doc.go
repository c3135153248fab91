// Package distributed is torchfit's distributed data parallel training over
// libtorch's own c10d: process groups (Gloo on the CPU, NCCL in CUDA
// builds), stores, collectives, a bucketed gradient reducer that overlaps
// communication with backward, and ZeRO stage 1 (sharded optimizer state).
//
// A process joins its group from torchrun's environment (InitFromEnv), so
// the same binary runs under torchrun --no_python and under Launch (the
// `torchfit launch` command: torchrun without Python), and Go and Python
// ranks can share a group. Every operation returns an *Error of a kind
// matched with errors.Is (ErrTimeout, ErrPeer, ErrBroken): a rank that
// dies or stops answering makes the others fail within the group's
// timeout, never hang. The store and Gloo have no authentication: run
// across machines on a trusted network only.
package distributed
