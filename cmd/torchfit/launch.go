package main

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/distributed"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/report"
)

// launchCommand is `torchfit launch --nproc N -- RECIPE train ...`:
// torchrun without Python. It starts N copies of this torchfit with
// torchrun's environment, serves their store, and stops them all when one
// fails.
func launchCommand() *cli.Command {
	return &cli.Command{
		Name:      "launch",
		Usage:     "data-parallel training: start --nproc ranks of a torchfit command, as torchrun --no-python does",
		ArgsUsage: "-- RECIPE train [flags]",
		Description: "Across machines (a trusted network only: the store and Gloo have no authentication), run on each machine\n" +
			"   torchfit launch --nnodes M --node-rank K --nproc N --master-addr NODE0_ADDRESS --master-port 29500 -- asr train ...",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "nproc", Aliases: []string{"nproc-per-node", "nproc_per_node"}, Value: 1, Usage: "ranks on this machine"},
			&cli.IntFlag{Name: "nnodes", Value: 1, Usage: "machines"},
			&cli.IntFlag{Name: "node-rank", Aliases: []string{"node_rank"}, Usage: "this machine's place (0 hosts the store)"},
			&cli.StringFlag{Name: "master-addr", Aliases: []string{"master_addr"}, Value: "127.0.0.1", Usage: "node 0's address, the only one its store listens on"},
			&cli.IntFlag{Name: "master-port", Aliases: []string{"master_port"}, Usage: "the store's port (0: a free one; several nodes: required)"},
			&cli.IntFlag{Name: "max-restarts", Aliases: []string{"max_restarts"}, Usage: "start every rank again this many times after one failed (one node); a train command resumes from the last checkpoint in its --checkpoint-dir"},
			&cli.DurationFlag{Name: "grace", Value: distributed.LaunchGrace, Usage: "after a rank fails: time the others get to stop (SIGTERM) before SIGKILL"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return recipes.Usagef("launch: give the command after --, e.g. torchfit launch --nproc 2 -- asr train --preset tiny")
			}
			// Launch reads 0 as its defaults (1 node, LaunchGrace): here 0
			// is the user's, and refused.
			if n := c.Int("nnodes"); n < 1 {
				return &recipes.ConfigError{Field: "nnodes", Value: n, Reason: "must be at least 1"}
			}
			if g := c.Duration("grace"); g <= 0 {
				return &recipes.ConfigError{Field: "grace", Value: g, Reason: "must be more than 0 (a duration: 30s, 2m)"}
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			ctx, stop := report.SignalContext(c.Context)
			defer stop()
			return distributed.Launch(ctx, distributed.LaunchConfig{
				NProc: c.Int("nproc"), NNodes: c.Int("nnodes"), NodeRank: c.Int("node-rank"),
				MasterAddr: c.String("master-addr"), MasterPort: c.Int("master-port"),
				Command: append([]string{self}, c.Args().Slice()...), Grace: c.Duration("grace"), MaxRestarts: c.Int("max-restarts"),
				Logf: report.NewLogger(os.Stderr).Printf,
			})
		},
	}
}
