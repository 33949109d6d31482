#pragma once
// Arrays from Python, taken as they are: any object that speaks DLPack (torch tensors) or the
// buffer protocol (numpy), never converted or copied, so a kernel writes into the memory the
// caller holds. Everything is checked before a plan runs, and a broken rule is a Python
// exception naming the argument ("Adam.param_groups[0].params[2]"), its value and the rule:
//   TypeError   not an array; a dtype other than float32 / float64, or not the plan's dtype
//   ValueError  read-only where the kernel writes; not C-contiguous; on a device this build
//               does not run on (a build without CUDA refuses CUDA memory by name); a size
//               that differs from its parameter's

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "heterograd/core/error.hpp"

namespace hgpy {

namespace nb = nanobind;

enum class element { f32, f64 };

/// One checked array: its memory, its element count and type, and the Python object that owns
/// it (held until the plan that uses it is gone).
struct array_ref {
  void* data = nullptr;
  std::size_t size = 0;
  element type = element::f32;
  nb::ndarray<nb::ro> keep;
};

/// How an argument is named in errors: `where.list[k]`, where k maps through `index` (a
/// sequence of ints, or None for k itself) so that a caller passing part of a parameter group
/// can name the tensor's place in the whole group.
struct namer {
  std::string where;
  nb::object index;
  std::string operator()(std::string_view list, std::size_t k) const {
    std::size_t at = k;
    if (index.is_valid() && !index.is_none()) at = nb::cast<std::size_t>(index[k]);
    std::string s = where;
    if (!s.empty()) s += '.';
    s += list;
    s += '[' + std::to_string(at) + ']';
    return s;
  }
};

[[noreturn]] inline void type_rule(const std::string& name, const std::string& value,
                                   std::string_view rule) {
  throw nb::type_error(heterograd::invalid_argument_message(name, value, rule).c_str());
}
[[noreturn]] inline void value_rule(const std::string& name, const std::string& value,
                                    std::string_view rule) {
  throw nb::value_error(heterograd::invalid_argument_message(name, value, rule).c_str());
}

inline std::string dtype_name(nb::dlpack::dtype t) {
  using code = nb::dlpack::dtype_code;
  std::string s;
  switch (static_cast<code>(t.code)) {
    case code::Int: s = "int"; break;
    case code::UInt: s = "uint"; break;
    case code::Float: s = "float"; break;
    case code::Bfloat: s = "bfloat"; break;
    case code::Complex: s = "complex"; break;
    case code::Bool: return "bool";
    default: s = "code" + std::to_string(t.code) + "_"; break;
  }
  return s + std::to_string(t.bits);
}

inline std::string device_name(int type) {
  switch (type) {
    case nb::device::cpu::value: return "cpu";
    case nb::device::cuda::value: return "cuda";
    case nb::device::cuda_host::value: return "cuda_host";
    case nb::device::opencl::value: return "opencl";
    case nb::device::vulkan::value: return "vulkan";
    case nb::device::metal::value: return "metal";
    case nb::device::rocm::value: return "rocm";
    case nb::device::rocm_host::value: return "rocm_host";
    case nb::device::cuda_managed::value: return "cuda_managed";
    case nb::device::oneapi::value: return "oneapi";
    default: return "device type " + std::to_string(type);
  }
}

/// Memory this build's kernels may touch: host memory (pinned host memory included). A CUDA
/// build would add device memory here; this one refuses it by name.
inline bool runs_on(int device_type) {
  return device_type == nb::device::cpu::value || device_type == nb::device::cuda_host::value ||
         device_type == nb::device::rocm_host::value;
}

inline bool c_contiguous(const nb::ndarray<nb::ro>& a) {
  if (a.size() <= 1) return true;
  std::int64_t expect = 1;
  for (std::size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expect) return false;
    expect *= static_cast<std::int64_t>(a.shape(i));
  }
  return true;
}

/// The array `x` (named `name`), checked: an array of float32 or float64 in host memory,
/// C-contiguous, and writable when `writable`. Never copies or converts: nanobind's implicit
/// conversions are off (convert = false), so a float64 tensor is refused, not copied.
inline array_ref take_array(nb::handle x, const std::string& name, bool writable) {
  nb::ndarray<> w;
  nb::ndarray<nb::ro> a;
  if (nb::try_cast(x, w, false)) {
    a = nb::ndarray<nb::ro>(w);  // the same import, seen read-only
  } else if (!nb::try_cast(x, a, false)) {
    type_rule(name, "a " + std::string(nb::type_name(x.type()).c_str()),
              "must be an array (an object with __dlpack__ or the buffer protocol: a torch "
              "tensor, a numpy array)");
  } else if (writable) {
    value_rule(name, "a read-only array", "must be writable (the optimizer updates it in place)");
  }
  if (!runs_on(a.device_type())) {
    value_rule(name, "on " + device_name(a.device_type()) + ":" + std::to_string(a.device_id()),
               "must be in host memory: this build of heterograd runs on the CPU only (built "
               "without CUDA)");
  }
  const auto t = a.dtype();
  array_ref r;
  if (t == nb::dtype<float>()) {
    r.type = element::f32;
  } else if (t == nb::dtype<double>()) {
    r.type = element::f64;
  } else {
    type_rule(name, "dtype " + dtype_name(t), "must be float32 or float64");
  }
  if (!c_contiguous(a))
    value_rule(name, "a non-contiguous array", "must be C-contiguous (call .contiguous() first)");
  r.data = const_cast<void*>(a.data());
  r.size = a.size();
  r.keep = std::move(a);
  return r;
}

inline const char* element_name(element e) {
  return e == element::f32 ? "float32" : "float64";
}

/// Takes every element of `list` (named `what`) as arrays, and checks that there are `count`
/// of them (count < 0: any number), each of `like[k]`'s size and type when `like` is given.
inline std::vector<array_ref> take_list(nb::handle list, std::string_view what, const namer& name,
                                        bool writable, const std::vector<array_ref>* like,
                                        std::string_view like_what) {
  const nb::sequence seq = nb::borrow<nb::sequence>(list);
  const std::size_t n = nb::len(seq);
  if (like && n != like->size()) {
    std::string w = name.where.empty() ? std::string(what) : name.where + "." + std::string(what);
    value_rule(w, std::to_string(n) + " arrays",
               "must hold one array per element of " + std::string(like_what) + " (" +
                   std::to_string(like->size()) + ")");
  }
  std::vector<array_ref> out;
  out.reserve(n);
  for (std::size_t k = 0; k < n; ++k) {
    const std::string nm = name(what, k);
    array_ref r = take_array(seq[k], nm, writable);
    if (like) {
      const array_ref& l = (*like)[k];
      if (r.type != l.type)
        type_rule(nm, std::string("dtype ") + element_name(r.type),
                  std::string("must be ") + element_name(l.type) + " like " + name(like_what, k));
      if (r.size != l.size)
        value_rule(nm, std::to_string(r.size) + " elements",
                   "must have as many as " + name(like_what, k) + " (" + std::to_string(l.size) +
                       ")");
    } else if (!out.empty() && r.type != out.front().type) {
      type_rule(nm, std::string("dtype ") + element_name(r.type),
                std::string("must be ") + element_name(out.front().type) + " like " +
                    name(what, 0) + " (one plan, one dtype)");
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace hgpy
