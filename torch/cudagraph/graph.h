// graph.h: the C interface of package cudagraph's native code (graph.cc),
// in the shim's shape: every function returns NULL or an error string
// (tf_err, freed by the Go side) and hands results back through out
// parameters.
#pragma once

#include <stdint.h>

#include "capi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tf_graph_s* tf_graph;

// tf_graph_new makes an empty graph for CUDA device dev with a side stream
// of its own (from libtorch's stream pool). Without CUDA (a build without
// the cuda tag) it returns the error "cudagraph: needs CUDA".
tf_err tf_graph_new(int32_t dev, tf_graph* out);

// tf_graph_enter waits for the device, then makes the graph's side stream
// the calling thread's current stream (warm-up and capture run there);
// tf_graph_exit waits for the device and restores the previous stream.
tf_err tf_graph_enter(tf_graph g);
tf_err tf_graph_exit(tf_graph g);

// tf_graph_capture_begin starts capturing the side stream's work into the
// graph (at::cuda::CUDAGraph::capture_begin), its allocations coming from a
// private pool of the caching allocator; tf_graph_capture_end ends it and
// instantiates the graph. Call both between enter and exit.
tf_err tf_graph_capture_begin(tf_graph g);
tf_err tf_graph_capture_end(tf_graph g);

// tf_graph_replay launches the captured work on the current stream.
tf_err tf_graph_replay(tf_graph g);

// tf_graph_free destroys the graph and releases its memory pool (NULL is
// a no-op). It restores the stream if the graph is still entered.
tf_err tf_graph_free(tf_graph g);

#ifdef __cplusplus
}
#endif
