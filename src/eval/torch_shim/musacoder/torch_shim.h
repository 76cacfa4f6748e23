// MooreEval's torch shim: the part of libtorch's C++ API that KernelBench candidates use in
// their load_inline sources (tensors' metadata and data pointers, factories, contiguous/view,
// dtype dispatch, TORCH_CHECK, the current CUDA stream), without ATen. A candidate compiled
// against it needs seconds instead of the tens of seconds ATen's headers cost every compiler
// front end. Tensors are handles into real at::Tensors owned by the bridge
// (torch_shim_abi.h); anything that allocates or reshapes is a real ATen call made there.
//
// It is a fast tier, never the judge: a source that does not compile against it is built
// with libtorch's real headers (compile_pool.cc), so what the shim lacks costs time, not a
// verdict. Where it does compile, it must behave as libtorch would: dtype checks in
// data_ptr<T>(), negative dims, TORCH_CHECK's messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <optional>

#ifdef MC_SHIM_WITH_HALF
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#endif

#include "musacoder/torch_shim_abi.h"

namespace mc_shim {

inline const mc_shim_ops*& ops() {
  static const mc_shim_ops* p = nullptr;
  return p;
}

}  // namespace mc_shim

namespace c10 {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
  const char* what_without_backtrace() const noexcept { return what(); }
};
using ValueError = Error;
using TypeError = Error;
using IndexError = Error;

namespace detail {
inline void cat(std::ostringstream&) {}
template <class T, class... R>
void cat(std::ostringstream& o, const T& v, const R&... r) {
  o << v;
  cat(o, r...);
}
template <class... A>
std::string str(const A&... a) {
  std::ostringstream o;
  cat(o, a...);
  return o.str();
}
}  // namespace detail

template <class... A>
std::string str(const A&... a) { return detail::str(a...); }

#ifdef MC_SHIM_WITH_HALF
#else
struct Half;      // declared only: the shim without half support does not dispatch to it
struct BFloat16;
#endif

enum class ScalarType : int8_t {
  Byte = 0, Char = 1, Short = 2, Int = 3, Long = 4, Half = 5, Float = 6, Double = 7, Bool = 11,
  BFloat16 = 15, Undefined = 127
};

inline const char* toString(ScalarType t) {
  switch (t) {
    case ScalarType::Byte: return "Byte";
    case ScalarType::Char: return "Char";
    case ScalarType::Short: return "Short";
    case ScalarType::Int: return "Int";
    case ScalarType::Long: return "Long";
    case ScalarType::Half: return "Half";
    case ScalarType::Float: return "Float";
    case ScalarType::Double: return "Double";
    case ScalarType::Bool: return "Bool";
    case ScalarType::BFloat16: return "BFloat16";
    default: return "Undefined";
  }
}
inline std::ostream& operator<<(std::ostream& o, ScalarType t) { return o << toString(t); }

inline size_t elementSize(ScalarType t) {
  switch (t) {
    case ScalarType::Byte: case ScalarType::Char: case ScalarType::Bool: return 1;
    case ScalarType::Short: case ScalarType::Half: case ScalarType::BFloat16: return 2;
    case ScalarType::Int: case ScalarType::Float: return 4;
    default: return 8;
  }
}
inline bool isFloatingType(ScalarType t) {
  return t == ScalarType::Half || t == ScalarType::Float || t == ScalarType::Double ||
         t == ScalarType::BFloat16;
}
inline bool isIntegralType(ScalarType t, bool include_bool) {
  return t == ScalarType::Byte || t == ScalarType::Char || t == ScalarType::Short ||
         t == ScalarType::Int || t == ScalarType::Long || (include_bool && t == ScalarType::Bool);
}

template <class T> struct CppTypeToScalarType;
#define MC_SHIM_MAP(T, S) \
  template <> struct CppTypeToScalarType<T> { static constexpr ScalarType value = ScalarType::S; };
MC_SHIM_MAP(uint8_t, Byte)
MC_SHIM_MAP(int8_t, Char)
MC_SHIM_MAP(int16_t, Short)
MC_SHIM_MAP(int32_t, Int)
MC_SHIM_MAP(int64_t, Long)
MC_SHIM_MAP(float, Float)
MC_SHIM_MAP(double, Double)
MC_SHIM_MAP(bool, Bool)
MC_SHIM_MAP(Half, Half)
MC_SHIM_MAP(BFloat16, BFloat16)
#undef MC_SHIM_MAP

// What tensor.dtype() returns: compares with ScalarTypes, as caffe2::TypeMeta does.
class TypeMeta {
 public:
  constexpr TypeMeta(ScalarType t = ScalarType::Undefined) : t_(t) {}
  ScalarType toScalarType() const { return t_; }
  size_t itemsize() const { return elementSize(t_); }
  const char* name() const { return toString(t_); }
  friend bool operator==(TypeMeta a, TypeMeta b) { return a.t_ == b.t_; }
  friend bool operator!=(TypeMeta a, TypeMeta b) { return a.t_ != b.t_; }
  friend bool operator==(TypeMeta a, ScalarType b) { return a.t_ == b; }
  friend bool operator!=(TypeMeta a, ScalarType b) { return a.t_ != b; }
  friend bool operator==(ScalarType a, TypeMeta b) { return a == b.t_; }
  friend bool operator!=(ScalarType a, TypeMeta b) { return a != b.t_; }
  friend std::ostream& operator<<(std::ostream& o, TypeMeta m) { return o << toString(m.t_); }

 private:
  ScalarType t_;
};

enum class DeviceType : int8_t { CPU = 0, CUDA = 1 };
constexpr DeviceType kCPU = DeviceType::CPU;
constexpr DeviceType kCUDA = DeviceType::CUDA;
using DeviceIndex = int8_t;

class Device {
 public:
  Device(DeviceType t, int index = -1) : type_(t), index_(static_cast<DeviceIndex>(index)) {}
  DeviceType type() const { return type_; }
  DeviceIndex index() const { return index_; }
  bool has_index() const { return index_ >= 0; }
  bool is_cuda() const { return type_ == DeviceType::CUDA; }
  bool is_cpu() const { return type_ == DeviceType::CPU; }
  std::string str() const {
    return std::string(is_cuda() ? "cuda" : "cpu") + (has_index() ? ":" + std::to_string(index_) : "");
  }
  friend bool operator==(const Device& a, const Device& b) {
    return a.type_ == b.type_ && a.index_ == b.index_;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
  friend std::ostream& operator<<(std::ostream& o, const Device& d) { return o << d.str(); }

 private:
  DeviceType type_;
  DeviceIndex index_;
};

enum class MemoryFormat : int8_t { Contiguous, Preserve, ChannelsLast, ChannelsLast3d };
enum class Layout : int8_t { Strided };
constexpr Layout kStrided = Layout::Strided;

template <class T>
class ArrayRef {
 public:
  ArrayRef() = default;
  ArrayRef(const T& one) : p_(&one), n_(1) {}
  ArrayRef(const T* p, size_t n) : p_(p), n_(n) {}
  ArrayRef(const std::vector<T>& v) : p_(v.data()), n_(v.size()) {}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
#endif
  // As c10::ArrayRef: views the list for the full expression it appears in.
  ArrayRef(std::initializer_list<T> l) : p_(l.begin()), n_(l.size()) {}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  const T* begin() const { return p_; }
  const T* end() const { return p_ + n_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  const T& operator[](size_t i) const { return p_[i]; }
  const T& at(size_t i) const {
    if (i >= n_) throw Error(detail::str("ArrayRef: index ", i, " out of range for size ", n_));
    return p_[i];
  }
  const T& front() const { return at(0); }
  const T& back() const { return at(n_ - 1); }
  std::vector<T> vec() const { return std::vector<T>(p_, p_ + n_); }
  operator std::vector<T>() const { return vec(); }
  friend bool operator==(ArrayRef a, ArrayRef b) {
    if (a.n_ != b.n_) return false;
    for (size_t i = 0; i < a.n_; ++i)
      if (!(a.p_[i] == b.p_[i])) return false;
    return true;
  }
  friend bool operator!=(ArrayRef a, ArrayRef b) { return !(a == b); }
  friend std::ostream& operator<<(std::ostream& o, ArrayRef a) {
    o << "[";
    for (size_t i = 0; i < a.n_; ++i) o << (i ? ", " : "") << a.p_[i];
    return o << "]";
  }

 private:
  const T* p_ = nullptr;
  size_t n_ = 0;
};
using IntArrayRef = ArrayRef<int64_t>;

template <class T>
using optional = std::optional<T>;
using std::nullopt;

class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(ScalarType t) : dtype_(t) {}
  TensorOptions(Device d) : device_(d) {}
  TensorOptions(DeviceType d) : device_(Device(d)) {}
  TensorOptions dtype(ScalarType t) const { auto o = *this; o.dtype_ = t; return o; }
  TensorOptions dtype(TypeMeta t) const { return dtype(t.toScalarType()); }
  template <class T>
  TensorOptions dtype() const { return dtype(CppTypeToScalarType<T>::value); }
  TensorOptions device(Device d) const { auto o = *this; o.device_ = d; return o; }
  TensorOptions device(DeviceType t, int index = -1) const { return device(Device(t, index)); }
  TensorOptions layout(Layout) const { return *this; }
  TensorOptions requires_grad(bool) const { return *this; }  // forward only: no autograd here
  TensorOptions memory_format(MemoryFormat) const { return *this; }
  TensorOptions pinned_memory(bool) const { return *this; }
  TypeMeta dtype() const { return TypeMeta(dtype_); }
  ScalarType scalar_type() const { return dtype_; }
  Device device() const { return device_; }

 private:
  ScalarType dtype_ = ScalarType::Float;
  Device device_ = Device(DeviceType::CPU);
};

inline TensorOptions dtype(ScalarType t) { return TensorOptions().dtype(t); }
template <class T>
TensorOptions dtype() { return TensorOptions().dtype<T>(); }
inline TensorOptions device(Device d) { return TensorOptions().device(d); }
inline TensorOptions device(DeviceType d) { return TensorOptions().device(Device(d)); }

}  // namespace c10

namespace at {

using c10::ArrayRef;
using c10::Device;
using c10::DeviceType;
using c10::IntArrayRef;
using c10::Layout;
using c10::MemoryFormat;
using c10::ScalarType;
using c10::TensorOptions;
using c10::TypeMeta;
using c10::kCPU;
using c10::kCUDA;
using c10::kStrided;
using c10::Half;
using c10::BFloat16;
using c10::optional;
using c10::nullopt;
using c10::dtype;
using c10::device;

constexpr ScalarType kByte = ScalarType::Byte, kUInt8 = ScalarType::Byte, kChar = ScalarType::Char,
                     kInt8 = ScalarType::Char, kShort = ScalarType::Short, kInt16 = ScalarType::Short,
                     kInt = ScalarType::Int, kInt32 = ScalarType::Int, kLong = ScalarType::Long,
                     kInt64 = ScalarType::Long, kHalf = ScalarType::Half, kFloat16 = ScalarType::Half,
                     kFloat = ScalarType::Float, kFloat32 = ScalarType::Float,
                     kDouble = ScalarType::Double, kFloat64 = ScalarType::Double,
                     kBool = ScalarType::Bool, kBFloat16 = ScalarType::BFloat16;

[[noreturn]] inline void shim_fail(const char* what) {
  const char* why = mc_shim::ops() ? mc_shim::ops()->last_error() : "the shim was not initialised";
  throw c10::Error(std::string(what) + ": " + (why ? why : "?"));
}

class Tensor {
 public:
  Tensor() = default;
  // Takes over one reference (the bridge's factories return new references).
  static Tensor adopt(mc_shim_tensor* h, const char* what) {
    if (!h) shim_fail(what);
    Tensor t;
    t.h_ = h;
    mc_shim::ops()->meta(h, &t.m_);
    return t;
  }
  static Tensor borrow(mc_shim_tensor* h) {
    mc_shim::ops()->retain(h);
    return adopt(h, "tensor");
  }
  Tensor(const Tensor& o) : h_(o.h_), m_(o.m_) {
    if (h_) mc_shim::ops()->retain(h_);
  }
  Tensor(Tensor&& o) noexcept : h_(o.h_), m_(o.m_) { o.h_ = nullptr; }
  Tensor& operator=(const Tensor& o) {
    if (this != &o) {
      Tensor tmp(o);
      std::swap(h_, tmp.h_);
      m_ = o.m_;
    }
    return *this;
  }
  Tensor& operator=(Tensor&& o) noexcept {
    std::swap(h_, o.h_);
    std::swap(m_, o.m_);
    return *this;
  }
  ~Tensor() {
    if (h_) mc_shim::ops()->release(h_);
  }
  // Hands the reference to the caller (the bridge, for return values).
  mc_shim_tensor* release_handle() {
    mc_shim_tensor* h = h_;
    h_ = nullptr;
    return h;
  }
  mc_shim_tensor* handle() const { return h_; }

  bool defined() const { return h_ != nullptr; }
  int64_t dim() const { return need().ndim; }
  int64_t ndimension() const { return dim(); }
  int64_t numel() const { return need().numel; }
  int64_t size(int64_t d) const { return need().sizes[wrap(d)]; }
  int64_t stride(int64_t d) const { return need().strides[wrap(d)]; }
  IntArrayRef sizes() const { return IntArrayRef(need().sizes, static_cast<size_t>(m_.ndim)); }
  IntArrayRef strides() const { return IntArrayRef(need().strides, static_cast<size_t>(m_.ndim)); }
  ScalarType scalar_type() const { return static_cast<ScalarType>(need().dtype); }
  TypeMeta dtype() const { return TypeMeta(scalar_type()); }
  int64_t element_size() const { return need().element_size; }
  size_t itemsize() const { return static_cast<size_t>(element_size()); }
  size_t nbytes() const { return static_cast<size_t>(numel() * element_size()); }
  Device device() const {
    return Device(static_cast<DeviceType>(need().device_type), need().device_index);
  }
  int64_t get_device() const { return need().device_type == 1 ? need().device_index : -1; }
  bool is_cuda() const { return need().device_type == 1; }
  bool is_cpu() const { return need().device_type == 0; }
  bool is_contiguous(MemoryFormat f = MemoryFormat::Contiguous) const {
    if (f != MemoryFormat::Contiguous)
      throw c10::Error("the MooreEval torch shim only knows the contiguous memory format");
    return need().contiguous != 0;
  }
  bool is_floating_point() const { return c10::isFloatingType(scalar_type()); }
  TensorOptions options() const { return TensorOptions().dtype(scalar_type()).device(device()); }

  void* data_ptr() const { return need().data; }
  const void* const_data_ptr() const { return need().data; }
  void* mutable_data_ptr() const { return need().data; }
  template <class T>
  T* data_ptr() const {
    check_type(c10::CppTypeToScalarType<std::remove_cv_t<T>>::value);
    return static_cast<T*>(need().data);
  }
  template <class T>
  const T* const_data_ptr() const { return data_ptr<T>(); }
  template <class T>
  T* mutable_data_ptr() const { return data_ptr<T>(); }
  template <class T>
  T* data() const { return data_ptr<T>(); }

  Tensor contiguous(MemoryFormat f = MemoryFormat::Contiguous) const {
    if (is_contiguous(f)) return *this;
    return adopt(mc_shim::ops()->unary(need_h(), MC_SHIM_OP_CONTIGUOUS), "contiguous");
  }
  Tensor clone() const { return adopt(mc_shim::ops()->unary(need_h(), MC_SHIM_OP_CLONE), "clone"); }
  Tensor& zero_() {
    *this = adopt(mc_shim::ops()->unary(need_h(), MC_SHIM_OP_ZERO_), "zero_");
    return *this;
  }
  Tensor view(IntArrayRef s) const { return shape(MC_SHIM_VIEW, s, "view"); }
  Tensor reshape(IntArrayRef s) const { return shape(MC_SHIM_RESHAPE, s, "reshape"); }
  Tensor permute(IntArrayRef s) const { return shape(MC_SHIM_PERMUTE, s, "permute"); }
  Tensor flatten() const { return reshape({-1}); }
  Tensor transpose(int64_t a, int64_t b) const {
    return adopt(mc_shim::ops()->transpose(need_h(), a, b), "transpose");
  }
  Tensor t() const { return transpose(0, 1); }
  Tensor to(ScalarType s) const {
    if (s == scalar_type()) return *this;
    return adopt(mc_shim::ops()->to_dtype(need_h(), static_cast<int32_t>(s)), "to");
  }
  Tensor to(TypeMeta s) const { return to(s.toScalarType()); }
  Tensor toType(ScalarType s) const { return to(s); }

 private:
  const mc_shim_meta& need() const {
    if (!h_) throw c10::Error("the tensor is undefined");
    return m_;
  }
  mc_shim_tensor* need_h() const {
    need();
    return h_;
  }
  int64_t wrap(int64_t d) const {
    int64_t n = m_.ndim;
    if (d < -n || d >= n || n == 0)
      throw c10::Error(c10::str("Dimension out of range (expected to be in range of [", -n, ", ",
                                n - 1, "], but got ", d, ")"));
    return d < 0 ? d + n : d;
  }
  void check_type(ScalarType want) const {
    if (scalar_type() != want)
      throw c10::Error(c10::str("expected scalar type ", want, " but found ", scalar_type()));
  }
  Tensor shape(int32_t op, IntArrayRef s, const char* what) const {
    return adopt(mc_shim::ops()->shape_op(need_h(), op, s.data(), static_cast<int32_t>(s.size())), what);
  }

  mc_shim_tensor* h_ = nullptr;
  mc_shim_meta m_{};
};

inline Tensor make(IntArrayRef s, const TensorOptions& o, int32_t fill, double v, const char* what) {
  Device d = o.device();
  return Tensor::adopt(mc_shim::ops()->factory(s.data(), static_cast<int32_t>(s.size()),
                                               static_cast<int32_t>(o.scalar_type()),
                                               static_cast<int32_t>(d.type()), d.index(), fill, v),
                       what);
}
inline Tensor empty(IntArrayRef s, const TensorOptions& o = {}) { return make(s, o, MC_SHIM_FILL_EMPTY, 0, "empty"); }
inline Tensor empty(IntArrayRef s, const TensorOptions& o, MemoryFormat) { return empty(s, o); }
inline Tensor zeros(IntArrayRef s, const TensorOptions& o = {}) { return make(s, o, MC_SHIM_FILL_ZEROS, 0, "zeros"); }
inline Tensor ones(IntArrayRef s, const TensorOptions& o = {}) { return make(s, o, MC_SHIM_FILL_ONES, 0, "ones"); }
inline Tensor full(IntArrayRef s, double v, const TensorOptions& o = {}) { return make(s, o, MC_SHIM_FILL_VALUE, v, "full"); }
inline Tensor empty_like(const Tensor& t) { return empty(t.sizes(), t.options()); }
inline Tensor empty_like(const Tensor& t, const TensorOptions& o) { return empty(t.sizes(), o); }
inline Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), t.options()); }
inline Tensor zeros_like(const Tensor& t, const TensorOptions& o) { return zeros(t.sizes(), o); }
inline Tensor ones_like(const Tensor& t) { return ones(t.sizes(), t.options()); }
inline Tensor full_like(const Tensor& t, double v) { return full(t.sizes(), v, t.options()); }


}  // namespace at


namespace torch {
using namespace at;  // as torch/types.h does
}

namespace mc_shim {
// TORCH_CHECK's message: the caller's words, or libtorch's default when there are none.
inline std::string check_message(const char* cond) {
  return ::c10::str("Expected ", cond, " to be true, but got false.");
}
template <class A, class... R>
std::string check_message(const char*, const A& a, const R&... r) { return ::c10::str(a, r...); }
}  // namespace mc_shim

#define TORCH_CHECK(cond, ...)                                                     \
  do {                                                                             \
    if (!(cond)) throw ::c10::Error(::mc_shim::check_message(#cond, ##__VA_ARGS__)); \
  } while (0)
#define TORCH_CHECK_VALUE TORCH_CHECK
#define TORCH_CHECK_TYPE TORCH_CHECK
#define TORCH_CHECK_INDEX TORCH_CHECK
#define TORCH_INTERNAL_ASSERT TORCH_CHECK
#define AT_ASSERTM TORCH_CHECK
#define AT_ASSERT(cond) TORCH_CHECK(cond)
#define TORCH_WARN(...) ((void)0)
#define AT_ERROR(...) throw ::c10::Error(::c10::str(__VA_ARGS__))


// ---- dtype dispatch: AT_DISPATCH_* as ATen defines them, for the types the shim knows ------
#define MC_SHIM_CASE(ENUM, TYPE, ...) \
  case ::c10::ScalarType::ENUM: {     \
    using scalar_t = TYPE;            \
    return __VA_ARGS__();             \
  }
#define MC_SHIM_DEFAULT(NAME, T)                                                           \
  default:                                                                                 \
    throw ::c10::Error(::c10::str('"', NAME, "\" not implemented for '", ::c10::toString(T), "'"));
#define MC_SHIM_FLOATS(...) \
  MC_SHIM_CASE(Double, double, __VA_ARGS__) MC_SHIM_CASE(Float, float, __VA_ARGS__)
#define MC_SHIM_INTS(...)                                                              \
  MC_SHIM_CASE(Byte, uint8_t, __VA_ARGS__) MC_SHIM_CASE(Char, int8_t, __VA_ARGS__)      \
  MC_SHIM_CASE(Int, int32_t, __VA_ARGS__) MC_SHIM_CASE(Long, int64_t, __VA_ARGS__)      \
  MC_SHIM_CASE(Short, int16_t, __VA_ARGS__)
#define MC_SHIM_EXTRA_Half(...) MC_SHIM_CASE(Half, ::c10::Half, __VA_ARGS__)
#define MC_SHIM_EXTRA_BFloat16(...) MC_SHIM_CASE(BFloat16, ::c10::BFloat16, __VA_ARGS__)
#define MC_SHIM_SWITCH(TYPE, NAME, CASES)                   \
  [&] {                                                      \
    const ::c10::ScalarType mc_shim_t = (TYPE);              \
    switch (mc_shim_t) {                                     \
      CASES                                                  \
      MC_SHIM_DEFAULT(NAME, mc_shim_t)                       \
    }                                                        \
  }()
#define AT_DISPATCH_FLOATING_TYPES(TYPE, NAME, ...) MC_SHIM_SWITCH(TYPE, NAME, MC_SHIM_FLOATS(__VA_ARGS__))
#define AT_DISPATCH_INTEGRAL_TYPES(TYPE, NAME, ...) MC_SHIM_SWITCH(TYPE, NAME, MC_SHIM_INTS(__VA_ARGS__))
#define AT_DISPATCH_ALL_TYPES(TYPE, NAME, ...) \
  MC_SHIM_SWITCH(TYPE, NAME, MC_SHIM_FLOATS(__VA_ARGS__) MC_SHIM_INTS(__VA_ARGS__))
#ifdef MC_SHIM_WITH_HALF
#define AT_DISPATCH_FLOATING_TYPES_AND_HALF(TYPE, NAME, ...) \
  MC_SHIM_SWITCH(TYPE, NAME, MC_SHIM_FLOATS(__VA_ARGS__) MC_SHIM_EXTRA_Half(__VA_ARGS__))
#define AT_DISPATCH_FLOATING_TYPES_AND(T1, TYPE, NAME, ...) \
  MC_SHIM_SWITCH(TYPE, NAME, MC_SHIM_FLOATS(__VA_ARGS__) MC_SHIM_EXTRA_SCALAR(T1, __VA_ARGS__))
#define AT_DISPATCH_FLOATING_TYPES_AND2(T1, T2, TYPE, NAME, ...)                     \
  MC_SHIM_SWITCH(TYPE, NAME, MC_SHIM_FLOATS(__VA_ARGS__) MC_SHIM_EXTRA_SCALAR(T1, __VA_ARGS__) \
                                 MC_SHIM_EXTRA_SCALAR(T2, __VA_ARGS__))
#define AT_DISPATCH_REDUCED_FLOATING_TYPES(TYPE, NAME, ...) \
  MC_SHIM_SWITCH(TYPE, NAME, MC_SHIM_EXTRA_Half(__VA_ARGS__) MC_SHIM_EXTRA_BFloat16(__VA_ARGS__))
// AT_DISPATCH_..._AND(at::kHalf, ...) names the extra type by value; the case label uses it
// directly, with scalar_t picked by a trait.
#define MC_SHIM_EXTRA_SCALAR(T, ...)                                                \
  case (T): {                                                                     \
    using scalar_t = typename ::mc_shim::TypeOf<(T)>::type;                       \
    return __VA_ARGS__();                                                         \
  }
namespace mc_shim {
template <::c10::ScalarType S> struct TypeOf;
template <> struct TypeOf<::c10::ScalarType::Half> { using type = ::c10::Half; };
template <> struct TypeOf<::c10::ScalarType::BFloat16> { using type = ::c10::BFloat16; };
template <> struct TypeOf<::c10::ScalarType::Bool> { using type = bool; };
template <> struct TypeOf<::c10::ScalarType::Byte> { using type = uint8_t; };
template <> struct TypeOf<::c10::ScalarType::Int> { using type = int32_t; };
template <> struct TypeOf<::c10::ScalarType::Long> { using type = int64_t; };
}  // namespace mc_shim
#endif

// ---- calling a candidate's function from the bridge (the glue compile_pool.cc generates) ----
namespace mc_shim {

[[noreturn]] inline void bad_arg(const char* fn, int i, const char* want) {
  throw ::c10::Error(::c10::str(fn, "(): incompatible argument ", i + 1, ": expected ", want));
}

template <class T, class = void>
struct FromValue;
template <>
struct FromValue<::at::Tensor> {
  static ::at::Tensor get(const char* fn, int i, const mc_shim_value& v) {
    if (v.kind != MC_SHIM_TENSOR) bad_arg(fn, i, "a Tensor");
    return ::at::Tensor::borrow(v.t);
  }
};
template <class T>
struct FromValue<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  static T get(const char* fn, int i, const mc_shim_value& v) {
    if (v.kind != MC_SHIM_INT) bad_arg(fn, i, "an int");
    return static_cast<T>(v.i);
  }
};
template <class T>
struct FromValue<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  static T get(const char* fn, int i, const mc_shim_value& v) {
    if (v.kind == MC_SHIM_DOUBLE) return static_cast<T>(v.d);
    if (v.kind == MC_SHIM_INT) return static_cast<T>(v.i);
    bad_arg(fn, i, "a float");
  }
};
template <>
struct FromValue<bool> {
  static bool get(const char* fn, int i, const mc_shim_value& v) {
    if (v.kind != MC_SHIM_BOOL_VALUE) bad_arg(fn, i, "a bool");
    return v.i != 0;
  }
};
template <class T>
struct FromValue<std::vector<T>> {
  static std::vector<T> get(const char* fn, int i, const mc_shim_value& v) {
    if (v.kind != MC_SHIM_LIST) bad_arg(fn, i, "a list");
    std::vector<T> out;
    for (int k = 0; k < v.n; ++k) out.push_back(FromValue<T>::get(fn, i, v.items[k]));
    return out;
  }
};
template <class T>
struct FromValue<std::optional<T>> {
  static std::optional<T> get(const char* fn, int i, const mc_shim_value& v) {
    if (v.kind == MC_SHIM_NONE) return std::nullopt;
    return FromValue<T>::get(fn, i, v);
  }
};

// What an argument is held as while the call runs: IntArrayRef views a vector held here.
template <class A>
struct Held { using type = std::decay_t<A>; };
template <>
struct Held<::c10::IntArrayRef> { using type = std::vector<int64_t>; };
template <>
struct Held<const ::c10::IntArrayRef&> { using type = std::vector<int64_t>; };

inline void put(mc_shim_value& out, ::at::Tensor t) {
  out = mc_shim_value{};
  if (!t.defined()) return;  // undefined tensor: None
  out.kind = MC_SHIM_TENSOR;
  out.t = t.release_handle();
}
template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
void put(mc_shim_value& out, T x) {
  out = mc_shim_value{};
  if constexpr (std::is_same_v<T, bool>) {
    out.kind = MC_SHIM_BOOL_VALUE;
    out.i = x;
  } else if constexpr (std::is_integral_v<T>) {
    out.kind = MC_SHIM_INT;
    out.i = static_cast<int64_t>(x);
  } else {
    out.kind = MC_SHIM_DOUBLE;
    out.d = static_cast<double>(x);
  }
}

inline void too_many(size_t n) {
  if (n > MC_SHIM_MAX_ITEMS)
    throw ::c10::Error(::c10::str("the MooreEval torch shim returns at most ", MC_SHIM_MAX_ITEMS,
                                  " values, not ", n));
}
template <class R>
void put_result(mc_shim_result* res, R r) {
  res->kind = 0;
  res->n = 1;
  put(res->v[0], std::move(r));
}
template <class T>
void put_result(mc_shim_result* res, std::vector<T> r) {
  too_many(r.size());
  res->kind = 2;
  res->n = static_cast<int32_t>(r.size());
  for (size_t k = 0; k < r.size(); ++k) put(res->v[k], std::move(r[k]));
}
template <class... T>
void put_result(mc_shim_result* res, std::tuple<T...> r) {
  too_many(sizeof...(T));
  res->kind = 1;
  res->n = sizeof...(T);
  size_t k = 0;
  std::apply([&](auto&... x) { ((put(res->v[k++], std::move(x))), ...); }, r);
}

template <class R, class... A, size_t... I>
void call(const char* name, R (*fn)(A...), const mc_shim_value* args, mc_shim_result* res,
          std::index_sequence<I...>) {
  std::tuple<typename Held<A>::type...> held{
      FromValue<typename Held<A>::type>::get(name, static_cast<int>(I), args[I])...};
  if constexpr (std::is_void_v<R>) {
    fn(std::get<I>(held)...);
    res->kind = 0;
    res->n = 1;
    res->v[0] = mc_shim_value{};
  } else {
    put_result(res, fn(std::get<I>(held)...));
  }
}

template <class R, class... A>
int invoke(const char* name, R (*fn)(A...), const mc_shim_value* args, int n, mc_shim_result* res,
           char* err, int err_size) noexcept {
  try {
    if (n != static_cast<int>(sizeof...(A)))
      throw ::c10::Error(::c10::str(name, "() takes ", sizeof...(A), " arguments (", n, " given)"));
    call(name, fn, args, res, std::index_sequence_for<A...>{});
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(err, static_cast<size_t>(err_size), "%s", e.what());
  } catch (...) {
    std::snprintf(err, static_cast<size_t>(err_size), "%s() threw a non-standard exception", name);
  }
  return 1;
}

}  // namespace mc_shim

#define MC_SHIM_EXPORT extern "C" __attribute__((visibility("default")))
