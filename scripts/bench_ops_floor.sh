#!/usr/bin/env bash
# Per-op overhead on 1-element tensors, each side's best of ROUNDS (8)
# interleaved rounds (make bench-ops-floor): torchfit with its typed fast
# path, torchfit with every call boxed (TORCHFIT_OPS=boxed), Python, and
# the C++ floor (package internal/opfloor). Arguments: the torch package's
# test binary, the Python, internal/opfloor's test binary.
set -euo pipefail
bin=$1 py=$2 floor=$3
pyops='
import timeit, torch
torch.set_num_threads(1)
g = {"x": torch.zeros(1), "y": torch.ones(1)}
for name, stmt in [("add", "x + y"), ("add_", "x.add_(y)")]:
    t = timeit.Timer(stmt, globals=g)
    print(name, min(t.repeat(repeat=7, number=100000)) / 100000 * 1e9)
'
go() { "$@" -test.run '^$' -test.bench 'BenchmarkOp(Add|AddInPlace)$' -test.benchtime 200ms |
	awk '/^BenchmarkOpAddInPlace/ {print "add_", $3} /^BenchmarkOpAdd-/ {print "add", $3}'; }
for r in $(seq "${ROUNDS:-8}"); do
	go "$bin" | sed 's/^/typed /'
	TORCHFIT_OPS=boxed go "$bin" | sed 's/^/boxed /'
	"$py" -c "$pyops" | sed 's/^/python /'
	"$floor" -test.run '^$' -test.bench 'BenchmarkFloor(Add|AddInPlace)$' -test.benchtime 200ms |
		awk '/^BenchmarkFloorAddInPlace/ {print "floor add_", $3} /^BenchmarkFloorAdd-/ {print "floor add", $3}'
done | awk '{k = $1 " " $2; if (!(k in m) || $3 + 0 < m[k]) m[k] = $3 + 0}
END {
	printf "| op | C++ floor | Go typed | Go boxed | Python | Go typed / Python | floor / Python |\n|---|---:|---:|---:|---:|---:|---:|\n"
	split("add add_", ops, " ")
	for (i = 1; i <= 2; i++) {
		o = ops[i]
		printf "| %s | %.0f ns | %.0f ns | %.0f ns | %.0f ns | %.2f | %.2f |\n", (o == "add" ? "x + y" : "x.add_(y)"),
			m["floor " o], m["typed " o], m["boxed " o], m["python " o], m["typed " o] / m["python " o], m["floor " o] / m["python " o]
	}
}'
