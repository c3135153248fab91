package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/torch/safetensors"
)

func convertCommand() *cli.Command {
	return &cli.Command{
		Name:      "convert",
		Usage:     "convert a state dict or checkpoint between torch.save (.pt, .pth, .bin, .ckpt) and safetensors (.safetensors), the format chosen by the output's extension",
		ArgsUsage: "IN OUT",
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return recipes.Usagef("convert takes IN and OUT, %d given", c.NArg())
			}
			in, out := c.Args().Get(0), c.Args().Get(1)
			if !safetensorsOut(out) && !torchSaveOut(out) {
				// The extension chooses the format: another one (a typo, a
				// swapped IN and OUT) would get a torch.save file by surprise.
				return recipes.Usagef("OUT %s: its extension chooses the format: %s for safetensors, or one of %s for torch.save",
					out, safetensors.Ext, strings.Join(torchSaveExts, ", "))
			}
			if _, err := os.Stat(out); err == nil {
				// Whatever is there (a checkpoint converted over another, or
				// itself, would lose its optimizer state; a metrics file, a
				// directory): convert only makes new files.
				return recipes.Usagef("OUT %s exists: convert writes a new file (remove it first, or choose another name)", out)
			}
			n, err := convert(in, out)
			if err != nil {
				return err
			}
			st, err := os.Stat(out)
			if err != nil {
				return err
			}
			fmt.Printf("wrote %s: %d tensors, %d bytes\n", out, n, st.Size())
			return nil
		},
	}
}

// torchSaveExts are the extensions of an OUT written with torch.save's
// format: .pt and .pth, Hugging Face's pytorch_model.bin, Lightning's
// .ckpt.
var torchSaveExts = []string{".pt", ".pth", ".bin", ".ckpt"}

func safetensorsOut(path string) bool { return strings.EqualFold(filepath.Ext(path), safetensors.Ext) }

func torchSaveOut(path string) bool {
	return slices.ContainsFunc(torchSaveExts, func(ext string) bool { return strings.EqualFold(filepath.Ext(path), ext) })
}

// convert reads IN as recipes.LoadWeights does (a state dict; a torchfit
// checkpoint's "model", or a dict's "state_dict") and writes its tensors
// to OUT. A safetensors OUT (by its extension) gets the metadata
// {"format": "pt"}, as Hugging Face's save_pretrained writes, and a
// checkpoint's "meta" strings. A torch.save OUT is a plain state dict,
// unless the metadata names a torchfit recipe: then it is a checkpoint's
// {"model": ..., "meta": ...} (without "format"). Either way LoadWeights
// reads OUT as it read IN.
func convert(in, out string) (int, error) {
	v, err := recipes.LoadWeights(in)
	if err != nil {
		return 0, &recipes.CheckpointError{Recipe: "convert", Path: in, Err: err}
	}
	defer ptfile.FreeAll(v)
	sd, meta, err := stateDictOf(v)
	if err != nil {
		return 0, &recipes.CheckpointError{Recipe: "convert", Path: in, Err: err}
	}
	switch _, ckpt := meta["recipe"]; {
	case safetensorsOut(out):
		if meta == nil {
			meta = map[string]string{}
		}
		meta["format"] = "pt"
		err = safetensors.Save(out, sd, meta)
	case ckpt:
		md := ptfile.NewDict()
		for _, k := range slices.Sorted(maps.Keys(meta)) {
			if k != "format" {
				md.Set(k, meta[k])
			}
		}
		err = ptfile.Save(out, ptfile.NewDict("model", sd, "meta", md))
	default:
		err = ptfile.SaveTensors(out, sd)
	}
	return len(sd), err
}

// stateDictOf finds the state dict in a loaded file, and the metadata: the
// string values of a checkpoint's "meta".
func stateDictOf(v any) (torch.StateDict, map[string]string, error) {
	d, ok := v.(*ptfile.Dict)
	if !ok {
		return nil, nil, fmt.Errorf("not a state dict or checkpoint (a %T)", v)
	}
	var meta map[string]string
	sdv := any(d)
	for _, key := range []string{"model", "state_dict"} {
		if x, ok := d.Get(key); ok {
			sdv = x
			if m, ok := d.Get("meta"); ok {
				if md, ok := m.(*ptfile.Dict); ok {
					meta = map[string]string{}
					for _, e := range md.Entries {
						k, kok := e.Key.(string)
						s, sok := e.Value.(string)
						if kok && sok {
							meta[k] = s
						}
					}
				}
			}
			break
		}
	}
	sd, ok := sdv.(*ptfile.Dict)
	if !ok {
		return nil, nil, fmt.Errorf("its model is not a state dict (a %T)", sdv)
	}
	var named torch.StateDict
	for _, e := range sd.Entries {
		name, ok := e.Key.(string)
		t, isT := e.Value.(*torch.Tensor)
		if !ok || !isT {
			return nil, nil, fmt.Errorf("the state dict holds %v: %T, not a tensor", e.Key, e.Value)
		}
		named = append(named, torch.Named{Name: name, T: t})
	}
	return named, meta, nil
}
