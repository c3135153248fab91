package tts

import "github.com/torchfit/torchfit/recipes"

// Defaults are the seed's (config.yaml): micro-batch 4 × accumulation 8
// (an effective batch of 32), prefetch 2.
var Defaults = recipes.Defaults{
	Data: "data/tts", MicroBatch: 4, Accum: 8, Precision: "no", Epochs: 40, LR: 5e-4, Warmup: 200, ClipNorm: 1,
	CheckpointDir: "checkpoints/tts", CheckpointEvery: 200, Workers: 1, Prefetch: 2, MemoryEvery: 100,
}

// codecDefaults train the codec on crops: batch 16, 20 epochs.
var codecDefaults = recipes.Defaults{
	Data: "data/tts", MicroBatch: 16, Accum: 1, Precision: "no", Epochs: 20, LR: 1e-3, Warmup: 100, ClipNorm: 1,
	CheckpointDir: "checkpoints/codec", CheckpointEvery: 500, Workers: 1, Prefetch: 2, MemoryEvery: 200,
}

// DefaultCodecConfig is 512 codes of 32 dimensions, 160 channels.
func DefaultCodecConfig() CodecConfig {
	return CodecConfig{Channels: 160, CodeDim: 32, Codes: 512, Beta: 0.25, ResDepth: 2}
}

// DefaultGPTConfig is the CPU-size GPT: 256 wide, 4 layers, the seed's
// reduced model (text_encoder_dim 128, decoder_dim 256).
func DefaultGPTConfig() GPTConfig {
	return GPTConfig{DecoderDim: 256, TextEncoderDim: 128, Layers: 4, Heads: 4, FF: 1024, Dropout: 0.1, CondLatents: 8,
		MaxText: 400, MaxCodes: 940, TextWeight: 0.01, CodeWeight: 1, TextRatio: 1, AlignedPositions: true}
}
