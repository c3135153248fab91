// Package nn is the layer torchfit's recipes are written in: modules with
// PyTorch's parameter naming, layers, losses, optimizers, learning-rate
// schedules, gradient clipping, state dicts, activation checkpointing and a
// memory estimate.
//
// A module is a struct that embeds Base and registers its parameters,
// buffers and child modules under the names PyTorch uses, so its StateDict
// lines up name for name and shape for shape with the equivalent PyTorch
// model's state_dict(). Forward methods are ordinary Go methods; layers
// with one tensor in and one out also satisfy Layer, which Sequential chains.
package nn
