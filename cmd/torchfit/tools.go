package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/monitor"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/torch"
)

func plotCommand() *cli.Command {
	return &cli.Command{
		Name:  "plot",
		Usage: "render a metrics JSONL file (loss with the evaluations, lr, memory against the step) or a `torchfit monitor` log (memory, utilisation) to PNG",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "metrics", Aliases: []string{"log"}, Usage: "metrics JSONL written by training (--metrics), or a monitor log (--log-file); required"},
			&cli.StringFlag{Name: "out", Usage: "PNG to write (default: beside the metrics file, its name with .png)"},
		},
		Action: func(c *cli.Context) error {
			if c.String("metrics") == "" {
				return recipes.Usagef("--metrics is required")
			}
			in := c.String("metrics")
			out := c.String("out")
			if out == "" {
				out = strings.TrimSuffix(in, filepath.Ext(in)) + ".png"
			}
			if err := recipes.CheckOutput("out", out, recipes.PNG); err != nil {
				return err
			}
			plot := report.PlotMetrics
			if monitor.IsLog(in) {
				plot = monitor.Plot
			}
			if err := plot(in, out); err != nil {
				return recipes.Usagef("%v", err)
			}
			fmt.Println("wrote", out)
			return nil
		},
	}
}

func memoryCommand() *cli.Command {
	return &cli.Command{
		Name:  "memory",
		Usage: "show the memory counter against a known allocation pattern, a cap and an OOM",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "device", Value: "cpu", Usage: "cpu or cuda[:N]"},
		},
		Action: func(c *cli.Context) error {
			dev, err := recipes.ParseDevice(c.String("device"))
			if err != nil {
				return recipes.Usagef("%v", err)
			}
			return memoryReport(dev)
		},
	}
}

// memoryReport allocates 10 tensors of 1000×1000 float32 (4,000,000 bytes
// each), frees half, caps memory and triggers an OOM, printing the counter
// at each point.
func memoryReport(dev torch.Device) error {
	line := func(what string) {
		s := torch.MustMemoryStats(dev)
		fmt.Printf("%-44s allocated %12d B  peak %12d B  reserved %12d B\n", what, s.Allocated, s.PeakAllocated, s.Reserved)
	}
	torch.EmptyCache()
	if err := torch.ResetPeakMemory(dev); err != nil {
		return err
	}
	base := torch.MustMemoryStats(dev).Allocated
	line("start")
	var ts []*torch.Tensor
	for i := 0; i < 10; i++ {
		ts = append(ts, torch.Zeros([]int64{1000, 1000}, dev))
	}
	line("10 × zeros(1000, 1000) float32")
	fmt.Printf("%-44s %d B (expected 40000000)\n", "  allocated - start", torch.MustMemoryStats(dev).Allocated-base)
	for _, t := range ts[:5] {
		t.Free()
	}
	line("5 freed")
	cap := torch.MustMemoryStats(dev).Allocated + 6_000_000
	if err := torch.SetMemoryLimit(dev, cap); err != nil {
		return err
	}
	fmt.Printf("limit set to allocated + 6,000,000 B\n")
	ok := torch.Zeros([]int64{1000, 1000}, dev)
	line("one more fits")
	err := torch.Try(func() { torch.Zeros([]int64{1000, 1000}, dev) })
	if te, isTorch := err.(*torch.Error); isTorch && te.OOM {
		fmt.Printf("next one: ErrOutOfMemory, requested %d B: %s\n", te.Requested, te.Msg)
	} else {
		return fmt.Errorf("expected an out-of-memory error, got %v", err)
	}
	torch.SetMemoryLimit(dev, 0)
	ok.Free()
	for _, t := range ts[5:] {
		t.Free()
	}
	torch.EmptyCache()
	line("all freed")
	s, err := torch.MemorySummary(dev)
	if err != nil {
		return err
	}
	fmt.Print(s)
	return nil
}
