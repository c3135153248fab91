// graph.cc: whole-step CUDA graphs over at::cuda::CUDAGraph.
//
// Everything CUDA is under TF_CUDA (the cuda build tag); without it each
// entry point returns "cudagraph: needs CUDA", which the Go side turns into
// ErrNoCUDA. Like the shim it calls no CUDA runtime function directly
// (so that no libcudart file is linked): streams through c10::cuda
// (getStreamFromPool, setCurrentCUDAStream), waits through
// c10::cuda::device_synchronize, and never c10::cuda::CUDAStreamGuard,
// whose inline guard implementation calls the runtime's event functions.
#include "graph.h"

#include "shim.h"

#include <memory>
#include <stdexcept>

#ifdef TF_CUDA
#include <ATen/Context.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#endif

#ifdef TF_CUDA
namespace {
// Graph reads what CUDAGraph keeps protected: whether the capture ended
// and its pool.
struct Graph : at::cuda::CUDAGraph {
#if TF_CUDAGRAPH_POOL_CLEANUP
  bool ended() const { return capture_ended_; }
  auto pool_id() const { return mempool_id_; }
#endif
};
}  // namespace

struct tf_graph_s {
  explicit tf_graph_s(int32_t dev)
      : dev(static_cast<c10::DeviceIndex>(dev)),
        side(c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(dev))),
        prev(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(dev))) {}
  c10::DeviceIndex dev;
  Graph graph;
  c10::cuda::CUDAStream side;
  c10::cuda::CUDAStream prev;
  bool entered = false;
  bool capturing = false;
};
#else
struct tf_graph_s {};
#endif

namespace {
#ifndef TF_CUDA
tf_err no_cuda() { return tf::make_error('E', "cudagraph: needs CUDA (torchfit built without the cuda tag)"); }
#else
tf_err no_graph() { return tf::make_error('E', "cudagraph: nil graph"); }
#endif
}  // namespace

extern "C" {

tf_err tf_graph_new(int32_t dev, tf_graph* out) {
  *out = nullptr;
#ifdef TF_CUDA
  TF_TRY
  TF_LAZY_INIT_CUDA();
  tf::DeviceScope scope(dev);
  *out = new tf_graph_s(dev);
  TF_CATCH
#else
  return no_cuda();
#endif
}

tf_err tf_graph_enter(tf_graph g) {
#ifdef TF_CUDA
  if (!g) return no_graph();
  TF_TRY
  tf::DeviceScope scope(g->dev);
  if (g->entered) throw std::runtime_error("cudagraph: side stream entered twice");
  // The side stream starts after everything queued so far (the weights,
  // the static inputs) has run.
  c10::cuda::device_synchronize();
  g->prev = c10::cuda::getCurrentCUDAStream(g->dev);
  c10::cuda::setCurrentCUDAStream(g->side);
  g->entered = true;
  TF_CATCH
#else
  return no_cuda();
#endif
}

tf_err tf_graph_exit(tf_graph g) {
#ifdef TF_CUDA
  if (!g) return no_graph();
  TF_TRY
  tf::DeviceScope scope(g->dev);
  if (!g->entered) return nullptr;
  g->entered = false;
  c10::cuda::setCurrentCUDAStream(g->prev);
  c10::cuda::device_synchronize();
  TF_CATCH
#else
  return no_cuda();
#endif
}

tf_err tf_graph_capture_begin(tf_graph g) {
#ifdef TF_CUDA
  if (!g) return no_graph();
  TF_TRY
  tf::DeviceScope scope(g->dev);
  if (!g->entered) throw std::runtime_error("cudagraph: capture outside the side stream");
  // {0, 0}: a private pool of the caching allocator for this graph.
  g->graph.capture_begin();
  g->capturing = true;
  TF_CATCH
#else
  return no_cuda();
#endif
}

tf_err tf_graph_capture_end(tf_graph g) {
#ifdef TF_CUDA
  if (!g) return no_graph();
  TF_TRY
  tf::DeviceScope scope(g->dev);
  if (!g->capturing) throw std::runtime_error("cudagraph: capture_end without capture_begin");
  g->capturing = false;
  g->graph.capture_end();
  TF_CATCH
#else
  return no_cuda();
#endif
}

tf_err tf_graph_replay(tf_graph g) {
#ifdef TF_CUDA
  if (!g) return no_graph();
  TF_TRY
  tf::DeviceScope scope(g->dev);
  g->graph.replay();
  TF_CATCH
#else
  return no_cuda();
#endif
}

tf_err tf_graph_free(tf_graph g) {
  if (!g) return nullptr;
#ifdef TF_CUDA
  TF_TRY
  std::unique_ptr<tf_graph_s> own(g);
  tf::DeviceScope scope(g->dev);
  if (g->capturing) {
    g->capturing = false;
    try {
      g->graph.capture_end();
    } catch (...) {
      // A capture that failed half-way (an operation that synchronised
      // invalidated it): the graph is discarded. capture_end threw before
      // ending the allocator's routing to the capture's pool, whose filter
      // points at this graph, and before marking the capture ended, so
      // that reset() will not release the pool: both are done here.
#if TF_CUDAGRAPH_POOL_CLEANUP
      if (!g->graph.ended()) {
        const auto id = g->graph.pool_id();
        try {
          c10::cuda::CUDACachingAllocator::endAllocateToPool(g->dev, id);
        } catch (...) {
          // capture_end had ended it
        }
        try {
          c10::cuda::CUDACachingAllocator::releasePool(g->dev, id);
        } catch (...) {
        }
      }
#endif
    }
  }
  if (g->entered) {
    g->entered = false;
    c10::cuda::setCurrentCUDAStream(g->prev);
  }
  c10::cuda::device_synchronize();
  g->graph.reset();
  TF_CATCH
#else
  delete g;
  return nullptr;
#endif
}

}  // extern "C"
