package data_test

import (
	"context"
	"fmt"
	"io"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// A loader over variable-length samples: two workers build padded batches
// (lengths rounded up to a multiple of 4) in order, on the CPU.
func ExampleLoader() {
	ds := data.DatasetFunc[data.Sample]{N: 6, F: func(i int) (data.Sample, error) {
		return data.Sample{"x": torch.Ones([]int64{int64(i + 1), 3})}, nil
	}}
	collate := data.PadCollate(map[string]data.Pad{"x": {Dim: 0, Multiple: 4}})
	l, _ := data.NewLoader(ds, collate, data.Options{BatchSize: 3, Workers: 2})
	defer l.Close()
	for {
		b, err := l.Next(context.Background())
		if err == io.EOF {
			break
		}
		fmt.Println(b.Fields["x"].Shape(), torch.ToSlice[int64](b.Lengths["x"]))
		b.Free()
	}
	// Output:
	// [3 4 3] [1 2 3]
	// [3 8 3] [4 5 6]
}
