// The Python extension that calls candidates built against the torch shim (torch_shim_abi.h).
// Built once per toolchain by the compile pool, against the machine's real libtorch; every
// shim-built candidate is then loaded through it instead of carrying its own pybind11 binding.
//
//   import mc_shim_bridge
//   fns = mc_shim_bridge.load("/path/to/ext.shim.so", ["forward", ...])  # {name: callable}
//
// Tensors cross as handles to at::Tensors this module owns; allocation, contiguous and views
// requested by the candidate are made here with ATen, so the run-time legality monitor sees
// them as it would in a load_inline build.
#include <dlfcn.h>
#include <torch/csrc/Exceptions.h>
#include <torch/extension.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#ifdef MC_BRIDGE_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include "musacoder/torch_shim_abi.h"

struct mc_shim_tensor {
  std::atomic<int> refs{1};
  at::Tensor t;
};

namespace {

namespace py = pybind11;

thread_local std::string g_error;

mc_shim_tensor* wrap(at::Tensor t) {
  auto* h = new mc_shim_tensor;
  h->t = std::move(t);
  return h;
}

template <class F>
mc_shim_tensor* guarded(F&& f) {
  try {
    return wrap(f());
  } catch (python_error& e) {
    // Raised by Python code the op reached (the legality monitor's dispatch mode): its message is
    // built only on request. Without it a candidate's "CUDA out of memory" read as "empty: ", and
    // the judge could not tell the verifier's memory from the candidate's own failure.
    e.persist();
    if (!*e.what()) e.build_message();
    g_error = e.what();
  } catch (const std::exception& e) {
    g_error = e.what();
  } catch (...) {
    g_error = "unknown error";
  }
  return nullptr;
}

mc_shim_tensor* op_factory(const int64_t* sizes, int32_t ndim, int32_t dtype, int32_t device_type,
                           int32_t device_index, int32_t fill, double value) {
  return guarded([&] {
    auto opts = at::TensorOptions()
                    .dtype(static_cast<at::ScalarType>(dtype))
                    .device(at::Device(static_cast<at::DeviceType>(device_type),
                                       static_cast<at::DeviceIndex>(device_index)));
    at::IntArrayRef s(sizes, static_cast<size_t>(ndim));
    switch (fill) {
      case MC_SHIM_FILL_ZEROS: return at::zeros(s, opts);
      case MC_SHIM_FILL_ONES: return at::ones(s, opts);
      case MC_SHIM_FILL_VALUE: return at::full(s, value, opts);
      default: return at::empty(s, opts);
    }
  });
}

mc_shim_tensor* op_unary(mc_shim_tensor* h, int32_t op) {
  return guarded([&] {
    switch (op) {
      case MC_SHIM_OP_CONTIGUOUS: return h->t.contiguous();
      case MC_SHIM_OP_CLONE: return h->t.clone();
      case MC_SHIM_OP_ZERO_: return h->t.zero_();
      default: throw std::runtime_error("unknown shim op " + std::to_string(op));
    }
  });
}

mc_shim_tensor* op_shape(mc_shim_tensor* h, int32_t op, const int64_t* dims, int32_t n) {
  return guarded([&] {
    at::IntArrayRef d(dims, static_cast<size_t>(n));
    switch (op) {
      case MC_SHIM_VIEW: return h->t.view(d);
      case MC_SHIM_RESHAPE: return h->t.reshape(d);
      case MC_SHIM_PERMUTE: return h->t.permute(d);
      default: throw std::runtime_error("unknown shim shape op " + std::to_string(op));
    }
  });
}

mc_shim_tensor* op_transpose(mc_shim_tensor* h, int64_t a, int64_t b) {
  return guarded([&] { return h->t.transpose(a, b); });
}

mc_shim_tensor* op_to_dtype(mc_shim_tensor* h, int32_t dtype) {
  return guarded([&] { return h->t.to(static_cast<at::ScalarType>(dtype)); });
}

void op_retain(mc_shim_tensor* h) { h->refs.fetch_add(1, std::memory_order_relaxed); }

void op_release(mc_shim_tensor* h) {
  if (h->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete h;
}

void op_meta(mc_shim_tensor* h, mc_shim_meta* m) {
  const at::Tensor& t = h->t;
  *m = mc_shim_meta{};
  m->data = t.data_ptr();
  m->dtype = static_cast<int32_t>(t.scalar_type());
  m->ndim = static_cast<int32_t>(t.dim());
  for (int64_t i = 0; i < t.dim() && i < MC_SHIM_MAX_DIMS; ++i) {
    m->sizes[i] = t.size(i);
    m->strides[i] = t.stride(i);
  }
  m->numel = t.numel();
  m->device_type = static_cast<int32_t>(t.device().type());
  m->device_index = t.device().index();
  m->contiguous = t.is_contiguous();
  m->element_size = static_cast<int32_t>(t.element_size());
}

void* op_current_stream(int32_t device_index) {
#ifdef MC_BRIDGE_CUDA
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_index)).stream();
#else
  (void)device_index;
  return nullptr;
#endif
}

const char* op_last_error() { return g_error.c_str(); }

const mc_shim_ops kOps = {MC_SHIM_ABI_VERSION, op_factory,  op_unary,   op_shape,
                          op_transpose,        op_to_dtype, op_retain,  op_release,
                          op_meta,             op_current_stream, op_last_error};

using CallFn = int (*)(const mc_shim_value*, int, mc_shim_result*, char*, int);

struct Library {
  void* handle = nullptr;
  std::string path;
  ~Library() = default;  // never dlclose: kernels and statics of a candidate live as long as us
};

// Python arguments as shim values; keeps the handles and lists alive for the call.
class Args {
 public:
  ~Args() {
    for (auto* h : handles_) op_release(h);
  }
  mc_shim_value convert(py::handle o, int depth = 0) {
    mc_shim_value v{};
    if (o.is_none()) return v;
    if (THPVariable_Check(o.ptr())) {
      v.kind = MC_SHIM_TENSOR;
      v.t = wrap(THPVariable_Unpack(o.ptr()));
      handles_.push_back(v.t);
      return v;
    }
    if (PyBool_Check(o.ptr())) {
      v.kind = MC_SHIM_BOOL_VALUE;
      v.i = o.ptr() == Py_True;
      return v;
    }
    if (PyLong_Check(o.ptr())) {
      v.kind = MC_SHIM_INT;
      v.i = o.cast<int64_t>();
      return v;
    }
    if (PyFloat_Check(o.ptr())) {
      v.kind = MC_SHIM_DOUBLE;
      v.d = o.cast<double>();
      return v;
    }
    if ((PyList_Check(o.ptr()) || PyTuple_Check(o.ptr())) && depth == 0) {
      auto seq = py::reinterpret_borrow<py::sequence>(o);
      lists_.emplace_back();
      auto& items = lists_.back();
      for (auto item : seq) items.push_back(convert(item, 1));
      v.kind = MC_SHIM_LIST;
      v.n = static_cast<int32_t>(items.size());
      v.items = items.data();
      return v;
    }
    throw py::type_error("the MooreEval torch shim cannot pass a " +
                         std::string(Py_TYPE(o.ptr())->tp_name) + " argument");
  }

 private:
  std::vector<mc_shim_tensor*> handles_;
  std::vector<std::vector<mc_shim_value>> lists_;  // std::list-like: only appended, items kept
};

py::object to_python(mc_shim_value& v) {
  switch (v.kind) {
    case MC_SHIM_TENSOR: {
      at::Tensor t = v.t->t;
      op_release(v.t);
      v.t = nullptr;
      return py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(t)));
    }
    case MC_SHIM_INT: return py::int_(v.i);
    case MC_SHIM_DOUBLE: return py::float_(v.d);
    case MC_SHIM_BOOL_VALUE: return py::bool_(v.i != 0);
    default: return py::none();
  }
}

class Function {
 public:
  Function(std::shared_ptr<Library> lib, std::string name, CallFn fn)
      : lib_(std::move(lib)), name_(std::move(name)), fn_(fn) {}

  py::object call(py::args args) {
    Args held;
    std::vector<mc_shim_value> values;
    values.reserve(args.size());
    for (auto a : args) values.push_back(held.convert(a));
    mc_shim_result res{};
    char err[2048] = {0};
    int rc = fn_(values.data(), static_cast<int>(values.size()), &res, err, sizeof(err));
    if (rc != 0) throw std::runtime_error(err);
    if (res.kind == 0) return to_python(res.v[0]);
    if (res.kind == 1) {
      py::tuple t(res.n);
      for (int i = 0; i < res.n; ++i) t[i] = to_python(res.v[i]);
      return t;
    }
    py::list l(res.n);
    for (int i = 0; i < res.n; ++i) l[i] = to_python(res.v[i]);
    return l;
  }
  const std::string& name() const { return name_; }

 private:
  std::shared_ptr<Library> lib_;
  std::string name_;
  CallFn fn_;
};

py::dict load(const std::string& path, const std::vector<std::string>& names) {
  auto lib = std::make_shared<Library>();
  lib->path = path;
  lib->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib->handle) throw std::runtime_error(std::string("cannot load ") + path + ": " + dlerror());
  auto version = reinterpret_cast<int (*)()>(dlsym(lib->handle, "mc_shim_abi_version"));
  auto init = reinterpret_cast<void (*)(const mc_shim_ops*)>(dlsym(lib->handle, "mc_shim_init"));
  if (!version || !init || version() != MC_SHIM_ABI_VERSION)
    throw std::runtime_error(path + " was not built against this torch shim (ABI " +
                             std::to_string(MC_SHIM_ABI_VERSION) + ")");
  init(&kOps);
  py::dict out;
  for (const auto& n : names) {
    auto fn = reinterpret_cast<CallFn>(dlsym(lib->handle, ("mc_shim_call_" + n).c_str()));
    if (!fn) throw std::runtime_error(path + " has no function " + n);
    out[py::str(n)] = py::cast(Function(lib, n, fn));
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(mc_shim_bridge, m) {
  py::class_<Function>(m, "Function")
      .def("__call__", &Function::call)
      .def_property_readonly("name", &Function::name);
  m.def("load", &load, "load a shim-built candidate library: {name: callable}");
  m.attr("ABI_VERSION") = MC_SHIM_ABI_VERSION;
}
