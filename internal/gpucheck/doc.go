// Package gpucheck is `make gpu-check`: every CUDA check of torchfit, each
// run in a child process of its own (a failure, a crash or a hang is
// recorded and the rest go on), and a report of them (gpu-report.md and
// gpu-report.json): the device, driver and versions, and per check its
// figures, pass/fail/skip and the command that reproduces it.
//
// Without a GPU every CUDA check reports "skipped: no GPU" and why CUDA is
// not available, so the whole path (build with the cuda tag, run, report)
// is exercised on any machine.
//
// The checks compare torchfit with Python PyTorch on the same machine
// (the python3 that holds torch; TORCHFIT_PYTHON overrides) and with
// nvidia-smi where the device's own view matters.
package gpucheck
