package recipes

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// Unused is a flag a command accepts but cannot honour, and why: a memory
// test that trains each size for a while takes the train command's flags
// (a seed's command line works verbatim up to the verb) but saves no
// checkpoint and writes no metrics. Such a flag is hidden from the
// command's help (HideFlags) and, given to Prepare, refused when the
// command line gives it (before any output is opened) and logged as
// unused when the --config file gives it: never silently ignored.
type Unused struct {
	Flag, Why string
}

// Names lists the flags of us.
func Names(us []Unused) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = u.Flag
	}
	return out
}

// HideFlags hides the named flags of fs from the help; they still parse,
// so a command line that gives one gets the refusal's reason rather than
// "flag provided but not defined". It panics on a name fs lacks (a typo
// would leave a refused flag listed).
func HideFlags(fs []cli.Flag, names ...string) []cli.Flag {
	for _, n := range names {
		found := false
		for _, f := range fs {
			if f.Names()[0] != n {
				continue
			}
			found = true
			switch f := f.(type) {
			case *cli.StringFlag:
				f.Hidden = true
			case *cli.IntFlag:
				f.Hidden = true
			case *cli.Int64Flag:
				f.Hidden = true
			case *cli.Uint64Flag:
				f.Hidden = true
			case *cli.Float64Flag:
				f.Hidden = true
			case *cli.BoolFlag:
				f.Hidden = true
			case *cli.DurationFlag:
				f.Hidden = true
			case *cli.GenericFlag:
				f.Hidden = true
			default:
				panic(fmt.Sprintf("recipes: HideFlags: --%s is a %T", n, f))
			}
		}
		if !found {
			panic("recipes: HideFlags: no flag --" + n)
		}
	}
	return fs
}

// refuseUnused returns a *ConfigError for the first of us that the
// command line gave; it runs before the --config file is applied, so
// every flag set is the command line's.
func refuseUnused(c *cli.Context, us []Unused) error {
	for _, u := range us {
		if c.IsSet(u.Flag) {
			return &ConfigError{Field: u.Flag, Value: c.Value(u.Flag), Reason: u.Why + ": leave it out here"}
		}
	}
	return nil
}

// logUnused logs each of us that the --config file gave as not used (see
// NotHere), and leaves an unused output unopened.
func (r *Run) logUnused(c *cli.Context, us []Unused) error {
	for _, u := range us {
		if err := r.NotHere(c, u.Flag, true, u.Why); err != nil {
			return err
		}
		switch u.Flag {
		case "metrics":
			r.Metrics = ""
		case "tensorboard":
			r.TensorBoard = ""
		}
	}
	return nil
}
