// Package dist is torchfit's distributed data parallel training over
// libtorch's own c10d: process groups (Gloo on the CPU, NCCL in CUDA
// builds), stores, collectives, a bucketed gradient reducer that overlaps
// communication with backward, and ZeRO stage 1 (sharded optimizer state).
package dist
