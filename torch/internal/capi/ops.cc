// ops.cc: calling any ATen operator through the dispatcher's boxed API.
//
// One entry point reaches every operator libtorch registers, so the shim
// needs no per-op C++ (and no per-op headers). Arguments are converted to
// IValues according to the operator's schema, trailing or TF_DEFAULT
// arguments take the schema's defaults, and the call goes through the full
// dispatcher: autograd, autocast and the CPU/CUDA kernels all apply.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>

#include <sstream>
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

struct tf_op_s {
  c10::OperatorHandle handle;
  std::vector<Want> want;
  std::vector<tf_optional<c10::IValue>> defaults;
  std::string name;
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
  *out = op;
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
