package main

import "github.com/torchfit/torchfit/torch/internal/schema"

// The schema reader is package schema's, shared with torch's argument
// checks.
type (
	Schema = schema.Schema
	Arg    = schema.Arg
	Ret    = schema.Ret
	Type   = schema.Type
)

var (
	ParseSchema = schema.Parse
	matching    = schema.Matching
	splitTop    = schema.SplitTop
	isIdent     = schema.IsIdent
)
