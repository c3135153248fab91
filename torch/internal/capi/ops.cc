// ops.cc: calling any ATen operator through the dispatcher.
//
// One entry point reaches every operator libtorch registers, so the shim
// needs no per-op C++ (and no per-op headers). Arguments are converted to
// IValues according to the operator's schema, trailing or TF_DEFAULT
// arguments take the schema's defaults, and the call goes through the full
// dispatcher: autograd, autocast and the CPU/CUDA kernels all apply.
// Operators whose arguments are tensors and Scalars and whose result is one
// tensor (most of a training step's calls) take a typed fast path instead:
// the same dispatcher's unboxed call, without the IValue stack.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>

#include <atomic>
#include <cstdlib>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "shim.h"

namespace {

enum class Want { Any, Tensor, Int, Double, Bool, IntList, DoubleList, TensorList, OptTensorList, Number, Other };

Want classify(const c10::TypePtr& type) {
  c10::TypePtr t = type;
  if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
  switch (t->kind()) {
    case c10::TypeKind::TensorType: return Want::Tensor;
    case c10::TypeKind::IntType: return Want::Int;
    case c10::TypeKind::FloatType: return Want::Double;
    case c10::TypeKind::BoolType: return Want::Bool;
    case c10::TypeKind::NumberType: return Want::Number;
    case c10::TypeKind::ListType: {
      auto elem = t->expectRef<c10::ListType>().getElementType();
      if (elem->kind() == c10::TypeKind::IntType || elem->kind() == c10::TypeKind::SymIntType) return Want::IntList;
      if (elem->kind() == c10::TypeKind::FloatType) return Want::DoubleList;
      if (elem->kind() == c10::TypeKind::TensorType) return Want::TensorList;
      if (auto o = elem->cast<c10::OptionalType>()) {
        if (o->getElementType()->kind() == c10::TypeKind::TensorType) return Want::OptTensorList;
      }
      return Want::Other;
    }
    default:
      // SymInt (2.x) behaves as int here.
      if (t->str() == "SymInt") return Want::Int;
      return Want::Other;
  }
}

}  // namespace

struct tf_op_s;

namespace {

// A typed call of one operator (see the fast path below): false when the
// arguments do not fit it, and the boxed call runs instead.
using FastCall = bool (*)(const tf_op_s& op, const tf_val* args, int32_t nargs, tf_val* outs, int32_t cap,
                          int32_t* nout);

}  // namespace

struct tf_op_s {
  c10::OperatorHandle handle;
  std::vector<Want> want;
  std::vector<tf_optional<c10::IValue>> defaults;
  std::string name;
  FastCall fast = nullptr;
  const void* typed = nullptr;  // the c10::TypedOperatorHandle<Sig> fast casts to (never freed, as ops are not)
};

namespace {

c10::IValue to_ivalue(const tf_op_s& op, size_t pos, const tf_val& v, const int64_t* arena) {
  Want w = op.want[pos];
  switch (v.kind) {
    case TF_DEFAULT: {
      const auto& d = op.defaults[pos];
      TORCH_CHECK(d.has_value(), op.name, ": argument ", pos, " (",
                  op.handle.schema().arguments()[pos].name(), ") has no default");
      return *d;
    }
    case TF_NONE:
      return c10::IValue();
    case TF_TENSOR:
      if (!v.p) return c10::IValue();
      return c10::IValue(reinterpret_cast<tf_tensor>(v.p)->t);
    case TF_INT:
      if (w == Want::Double) return c10::IValue(static_cast<double>(v.i));
      if (w == Want::Bool) return c10::IValue(v.i != 0);
      if (w == Want::IntList) return c10::IValue(std::vector<int64_t>{v.i});
      return c10::IValue(v.i);
    case TF_DOUBLE:
      TORCH_CHECK(w != Want::Int && w != Want::IntList, op.name, ": argument ", pos, " (",
                  op.handle.schema().arguments()[pos].name(), ") must be an integer");
      return c10::IValue(v.d);
    case TF_BOOL:
      return c10::IValue(v.i != 0);
    case TF_INTS: {
      std::vector<int64_t> xs(arena + v.i, arena + v.i + v.n);
      return c10::IValue(std::move(xs));
    }
    case TF_DOUBLES: {
      std::vector<double> xs(v.n);
      std::memcpy(xs.data(), arena + v.i, sizeof(double) * v.n);
      return c10::IValue(std::move(xs));
    }
    case TF_TENSORS: {
      if (w == Want::OptTensorList) {
        c10::List<tf_optional<at::Tensor>> xs;
        xs.reserve(v.n);
        for (int32_t k = 0; k < v.n; k++) {
          auto h = reinterpret_cast<tf_tensor>(static_cast<uintptr_t>(arena[v.i + k]));
          if (h) xs.push_back(tf_optional<at::Tensor>(h->t));
          else xs.push_back(tf_optional<at::Tensor>());
        }
        return c10::IValue(std::move(xs));
      }
      c10::List<at::Tensor> xs;
      xs.reserve(v.n);
      for (int32_t k = 0; k < v.n; k++) {
        auto h = reinterpret_cast<tf_tensor>(static_cast<uintptr_t>(arena[v.i + k]));
        TORCH_CHECK(h, op.name, ": undefined tensor in a tensor list");
        xs.push_back(h->t);
      }
      return c10::IValue(std::move(xs));
    }
    case TF_STRING:
      return c10::IValue(std::string(reinterpret_cast<const char*>(arena + v.i), v.n));
    case TF_DEVICE:
      return c10::IValue(c10::Device(static_cast<c10::DeviceType>(v.i), static_cast<c10::DeviceIndex>(v.n)));
  }
  TORCH_CHECK(false, op.name, ": bad argument kind ", v.kind);
}

tf_val from_ivalue(c10::IValue&& iv) {
  tf_val out{};
  if (iv.isTensor()) {
    at::Tensor t = std::move(iv).toTensor();
    if (t.defined()) {
      out.kind = TF_TENSOR;
      out.p = reinterpret_cast<uintptr_t>(tf::wrap(std::move(t)));
    } else {
      out.kind = TF_NONE;
    }
  } else if (iv.isTensorList()) {
    auto list = std::move(iv).toTensorList();
    out.kind = TF_TENSORS;
    out.n = static_cast<int32_t>(list.size());
    auto arr = static_cast<tf_tensor*>(std::malloc(sizeof(tf_tensor) * (list.size() + 1)));
    for (size_t k = 0; k < list.size(); k++) arr[k] = tf::wrap(list.get(k));
    out.p = reinterpret_cast<uintptr_t>(arr);
  } else if (iv.isInt()) {
    out.kind = TF_INT;
    out.i = iv.toInt();
  } else if (iv.isDouble()) {
    out.kind = TF_DOUBLE;
    out.d = iv.toDouble();
  } else if (iv.isBool()) {
    out.kind = TF_BOOL;
    out.i = iv.toBool();
  } else if (iv.isNone()) {
    out.kind = TF_NONE;
  } else {
    TORCH_CHECK(false, "unsupported operator result type ", iv.tagKind());
  }
  return out;
}

// ---- the typed fast path ---------------------------------------------------
// An operator whose arguments are all tensors, optional tensors and
// Scalars, and whose one result is a tensor (or the first argument, for an
// in-place operator), is called through the dispatcher's typed, unboxed
// API, as at::add and Python's bindings call it: no IValue stack, no
// boxing of the kernel's arguments and result. Autograd, autocast and the
// kernels are the same dispatcher's. A call whose arguments do not fit
// (None for a tensor, a missing argument with no default, another kind)
// takes the boxed path, which reports what is wrong.

const at::Tensor* tensor_arg(const tf_val* args, int32_t nargs, size_t k) {
  if (k >= static_cast<size_t>(nargs) || args[k].kind != TF_TENSOR || !args[k].p) return nullptr;
  return &reinterpret_cast<tf_tensor>(args[k].p)->t;
}

template <class P>
struct Slot;

template <>
struct Slot<const at::Tensor&> {
  const at::Tensor* p = nullptr;
  bool load(const tf_op_s&, const tf_val* args, int32_t nargs, size_t k) { return (p = tensor_arg(args, nargs, k)); }
  const at::Tensor& get() const { return *p; }
};

// A mutable tensor (an in-place operator's self) is passed as a reference
// of its own, so no kernel can touch the caller's handle.
template <>
struct Slot<at::Tensor&> {
  at::Tensor t;
  bool load(const tf_op_s&, const tf_val* args, int32_t nargs, size_t k) {
    const at::Tensor* p = tensor_arg(args, nargs, k);
    if (!p) return false;
    t = *p;
    return true;
  }
  at::Tensor& get() { return t; }
};

template <>
struct Slot<const tf_optional<at::Tensor>&> {
  tf_optional<at::Tensor> t;
  bool load(const tf_op_s& op, const tf_val* args, int32_t nargs, size_t k) {
    if (k < static_cast<size_t>(nargs) && args[k].kind != TF_DEFAULT) {
      if (args[k].kind == TF_NONE || (args[k].kind == TF_TENSOR && !args[k].p)) return true;
      const at::Tensor* p = tensor_arg(args, nargs, k);
      if (!p) return false;
      t = *p;
      return true;
    }
    const auto& d = op.defaults[k];
    return d.has_value() && d->isNone();
  }
  const tf_optional<at::Tensor>& get() const { return t; }
};

template <>
struct Slot<const c10::Scalar&> {
  c10::Scalar s;
  bool load(const tf_op_s& op, const tf_val* args, int32_t nargs, size_t k) {
    if (k < static_cast<size_t>(nargs)) {
      switch (args[k].kind) {
        case TF_INT: s = c10::Scalar(static_cast<int64_t>(args[k].i)); return true;
        case TF_DOUBLE: s = c10::Scalar(args[k].d); return true;
        case TF_BOOL: s = c10::Scalar(args[k].i != 0); return true;
        case TF_DEFAULT: break;
        default: return false;
      }
    }
    const auto& d = op.defaults[k];
    if (!d.has_value() || !d->isScalar()) return false;
    s = d->toScalar();
    return true;
  }
  const c10::Scalar& get() const { return s; }
};

tf_val tensor_result(at::Tensor t) {
  tf_val out{};
  if (t.defined()) {
    out.kind = TF_TENSOR;
    out.p = reinterpret_cast<uintptr_t>(tf::wrap(std::move(t)));
  } else {
    out.kind = TF_NONE;
  }
  return out;
}

template <class Sig>
struct Fast;

template <class R, class... P>
struct Fast<R(P...)> {
  static bool call(const tf_op_s& op, const tf_val* args, int32_t nargs, tf_val* outs, int32_t cap, int32_t* nout) {
    return run(op, args, nargs, outs, cap, nout, std::index_sequence_for<P...>{});
  }
  template <size_t... K>
  static bool run(const tf_op_s& op, const tf_val* args, int32_t nargs, tf_val* outs, int32_t cap, int32_t* nout,
                  std::index_sequence<K...>) {
    std::tuple<Slot<P>...> slots;
    if (!(std::get<K>(slots).load(op, args, nargs, K) && ...)) return false;
    const auto& h = *static_cast<const c10::TypedOperatorHandle<R(P...)>*>(op.typed);
    if (cap > 0) {
      outs[0] = tensor_result(h.call(std::get<K>(slots).get()...));
    } else {
      h.call(std::get<K>(slots).get()...);
    }
    *nout = 1;
    return true;
  }
  static void attach(tf_op_s& op) {
    op.typed = new c10::TypedOperatorHandle<R(P...)>(op.handle.typed<R(P...)>());
    op.fast = &call;
  }
};

// The argument patterns with a fast path: T a tensor, M a mutable tensor
// (self of an in-place operator, which returns it), O an optional tensor,
// S a Scalar. They cover the elementwise arithmetic and activations, the
// matrix products and linear of a training step.
using T = const at::Tensor&;
using M = at::Tensor&;
using O = const tf_optional<at::Tensor>&;
using S = const c10::Scalar&;
using Attach = void (*)(tf_op_s&);
const std::pair<const char*, Attach> fast_patterns[] = {
    {"T", &Fast<at::Tensor(T)>::attach},
    {"TT", &Fast<at::Tensor(T, T)>::attach},
    {"TTT", &Fast<at::Tensor(T, T, T)>::attach},
    {"TS", &Fast<at::Tensor(T, S)>::attach},
    {"TSS", &Fast<at::Tensor(T, S, S)>::attach},
    {"TTS", &Fast<at::Tensor(T, T, S)>::attach},
    {"TTO", &Fast<at::Tensor(T, T, O)>::attach},
    {"TTTS", &Fast<at::Tensor(T, T, T, S)>::attach},
    {"TTTSS", &Fast<at::Tensor(T, T, T, S, S)>::attach},
    {"M", &Fast<at::Tensor&(M)>::attach},
    {"MT", &Fast<at::Tensor&(M, T)>::attach},
    {"MS", &Fast<at::Tensor&(M, S)>::attach},
    {"MSS", &Fast<at::Tensor&(M, S, S)>::attach},
    {"MTS", &Fast<at::Tensor&(M, T, S)>::attach},
    {"MTTS", &Fast<at::Tensor&(M, T, T, S)>::attach},
};

// fast_pattern spells the schema as a pattern ("" when it has none).
std::string fast_pattern(const c10::FunctionSchema& s) {
  if (s.returns().size() != 1 || s.returns()[0].type()->kind() != c10::TypeKind::TensorType || s.is_vararg() ||
      s.is_varret()) {
    return "";
  }
  auto writes = [](const c10::AliasInfo* a) { return a != nullptr && a->isWrite(); };
  const bool inplace = writes(s.returns()[0].alias_info());
  std::string p;
  for (size_t k = 0; k < s.arguments().size(); k++) {
    const auto& a = s.arguments()[k];
    const auto& t = a.type();
    if (writes(a.alias_info()) != (inplace && k == 0)) return "";
    switch (t->kind()) {
      case c10::TypeKind::TensorType: p += k == 0 && inplace ? 'M' : 'T'; break;
      case c10::TypeKind::NumberType: p += 'S'; break;
      case c10::TypeKind::OptionalType:
        if (t->expectRef<c10::OptionalType>().getElementType()->kind() != c10::TypeKind::TensorType) return "";
        p += 'O';
        break;
      default: return "";
    }
  }
  return inplace && (p.empty() || p[0] != 'M') ? "" : p;
}

// typed_calls switches the fast path (TORCHFIT_OPS=boxed starts with it
// off; tf_ops_set_typed switches it).
std::atomic<bool> typed_calls{[] {
  const char* v = std::getenv("TORCHFIT_OPS");
  return v == nullptr || std::string(v) != "boxed";
}()};

// typed_here counts the calling thread's typed calls (for tests).
thread_local uint64_t typed_here = 0;

// attach_fast gives op its typed call when its schema has a pattern and
// its kernels' C++ signature is that pattern's (the dispatcher checks).
void attach_fast(tf_op_s& op) {
  const std::string p = fast_pattern(op.handle.schema());
  for (const auto& [name, attach] : fast_patterns) {
    if (p != name) continue;
    try {
      attach(op);
    } catch (const std::exception&) {
      op.fast = nullptr;  // another C++ signature: the boxed call serves it
    }
    return;
  }
}

}  // namespace

extern "C" {

tf_err tf_op_find(const char* name, const char* overload, tf_op* out) {
  TF_TRY
  auto h = c10::Dispatcher::singleton().findSchema({name, overload});
  TORCH_CHECK(h.has_value(), "no operator ", name, overload[0] ? "." : "", overload, " in this libtorch");
  auto op = new tf_op_s{*h, {}, {}, std::string(name) + (overload[0] ? "." : "") + overload};
  for (const auto& a : h->schema().arguments()) {
    op->want.push_back(classify(a.type()));
    op->defaults.push_back(a.default_value());
  }
  attach_fast(*op);
  *out = op;
  TF_CATCH
}

tf_err tf_op_typed(tf_op op, int32_t* out) {
  TF_TRY
  *out = op->fast != nullptr;
  TF_CATCH
}

tf_err tf_ops_set_typed(int32_t on, int32_t* was) {
  TF_TRY
  *was = typed_calls.exchange(on != 0);
  TF_CATCH
}

tf_err tf_ops_typed_here(uint64_t* out) {
  TF_TRY
  *out = typed_here;
  TF_CATCH
}

tf_err tf_op_schema(tf_op op, char** out) {
  TF_TRY
  std::ostringstream s;
  s << op->handle.schema();
  *out = strdup(s.str().c_str());
  TF_CATCH
}

tf_err tf_op_call(tf_op op, const tf_val* args, int32_t nargs, const int64_t* arena, tf_val* outs,
                  int32_t cap, int32_t* nout, uint64_t* scope) {
  *scope = tf_scope_current();
  TF_TRY
  if (tf::fault_countdown.load(std::memory_order_relaxed) > 0) tf::maybe_fault();
  const size_t total = op->want.size();
  TORCH_CHECK(static_cast<size_t>(nargs) <= total, op->name, " takes at most ", total, " arguments, got ", nargs);
  // A per-thread stack spares an allocation per call; a nested call on the
  // same thread (none is known, but cheap to allow) gets its own.
  // The stack is emptied on every way out, exceptions included, so no
  // argument or result outlives the call.
  if (op->fast != nullptr && typed_calls.load(std::memory_order_relaxed) && op->fast(*op, args, nargs, outs, cap, nout)) {
    typed_here++;
    return nullptr;
  }
  static thread_local torch::jit::Stack reused;
  static thread_local int depth = 0;
  torch::jit::Stack local;
  torch::jit::Stack& stack = depth == 0 ? reused : local;
  struct Guard {
    torch::jit::Stack& s;
    explicit Guard(torch::jit::Stack& st) : s(st) { depth++; }
    ~Guard() {
      s.clear();
      depth--;
    }
  } guard(stack);
  stack.reserve(total);
  for (size_t k = 0; k < total; k++) {
    if (k < static_cast<size_t>(nargs)) {
      stack.push_back(to_ivalue(*op, k, args[k], arena));
    } else {
      tf_val def{};
      stack.push_back(to_ivalue(*op, k, def, arena));
    }
  }
  op->handle.callBoxed(stack);
  *nout = static_cast<int32_t>(stack.size());
  for (size_t k = 0; k < stack.size() && k < static_cast<size_t>(cap); k++) {
    outs[k] = from_ivalue(std::move(stack[k]));
  }
  TF_CATCH
}

}  // extern "C"
