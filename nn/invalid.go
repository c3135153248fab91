package nn

import (
	"fmt"

	"github.com/torchfit/torchfit/torch"
)

// invalid is the *torch.Error a constructor or method panics with for an
// argument it cannot take (a dropout probability above 1, heads that do
// not divide the width, a name registered twice), as tensor math panics:
// torch.Try and the per-step boundaries turn it into an error.
func invalid(format string, args ...any) *torch.Error {
	return &torch.Error{Op: "nn", Msg: fmt.Sprintf(format, args...)}
}
