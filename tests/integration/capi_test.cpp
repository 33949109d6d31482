// The C API (heterograd/c/heterograd.h): its optimizers equal the C++ optimizers bitwise, and
// bad input (null pointers, size mismatches, unknown handles, bad options) returns a status
// and a message, changes nothing and never aborts. This file is the C API's implementation TU.
#define HG_C_API_IMPLEMENTATION
#include "heterograd/c/heterograd.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/algorithms/sync/local_sgd.hpp"
#include "heterograd/algorithms/sync/workers.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/runtime/server.hpp"
#include "hg_test.hpp"

#if defined(__CUDACC__)
#include <cuda_runtime_api.h>
#include <thrust/device_vector.h>
#endif

namespace hg = heterograd;
namespace ho = heterograd::optim;
namespace hs = heterograd::algorithms::sync;
namespace ha = heterograd::algorithms::async;
namespace hr = heterograd::runtime;
namespace hc = heterograd::comm;
namespace hd = heterograd::c_api::detail;

namespace {

template <class T>
std::vector<T> random_vector(std::size_t n, std::uint64_t stream) {
  const hg::counter_rng rng(hg_test::seed(), stream);
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(rng.normal(i));
  return v;
}

template <class T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T>
constexpr std::int32_t dtype_of() {
  return sizeof(T) == 8 ? HG_FLOAT64 : HG_FLOAT32;
}

std::string message() { return hg_last_error(); }

/// The C++ optimizer an hg_optimizer_config describes.
template <class F>
void with_cpp_optimizer(const hg_optimizer_config& c, F&& f) {
  const ho::adam_config a{.lr = c.lr,
                                                 .beta1 = c.beta1,
                                                 .beta2 = c.beta2,
                                                 .eps = c.eps,
                                                 .weight_decay = c.weight_decay,
                                                 .bias_correction = c.bias_correction != 0};
  const ho::momentum_config m{
      .lr = c.lr, .momentum = c.momentum, .dampening = c.dampening, .weight_decay = c.weight_decay};
  switch (c.kind) {
    case HG_OPTIMIZER_SGD: f(ho::sgd({.lr = c.lr, .weight_decay = c.weight_decay})); break;
    case HG_OPTIMIZER_MOMENTUM: f(ho::momentum(m)); break;
    case HG_OPTIMIZER_NESTEROV: f(ho::nesterov(m)); break;
    case HG_OPTIMIZER_ADAM: f(ho::adam(a)); break;
    default: f(ho::adamw(a)); break;
  }
}

struct adam_fixture {
  static constexpr std::size_t n = 1000;
  hg_optimizer opt = nullptr;
  std::vector<float> p = random_vector<float>(n, 1), g = random_vector<float>(n, 2);
  adam_fixture() {
    hg_optimizer_config c;
    BOOST_REQUIRE_EQUAL(hg_optimizer_config_init(&c, HG_OPTIMIZER_ADAM), HG_OK);
    BOOST_REQUIRE_EQUAL(hg_optimizer_create(&opt, &c, HG_FLOAT32, n, HG_DEVICE_HOST), HG_OK);
    BOOST_REQUIRE_EQUAL(hg_optimizer_step(opt, p.data(), g.data(), n, HG_DEVICE_HOST), HG_OK);
  }
  ~adam_fixture() { hg_optimizer_destroy(opt); }
  std::int64_t steps() const {
    std::int64_t k = -1;
    BOOST_REQUIRE_EQUAL(hg_optimizer_step_count(opt, &k), HG_OK);
    return k;
  }
  std::vector<std::byte> state() const {
    std::size_t size = 0;
    BOOST_REQUIRE_EQUAL(hg_optimizer_save_state(opt, nullptr, 0, &size), HG_OK);
    std::vector<std::byte> b(size);
    BOOST_REQUIRE_EQUAL(hg_optimizer_save_state(opt, b.data(), b.size(), &size), HG_OK);
    return b;
  }
};

/// `count` Ts starting `offset` bytes into a buffer aligned for T: offset 0 is aligned, the
/// others are not (the memory behind them must not be touched).
template <class T>
struct offset_buffer {
  std::vector<T> storage;
  offset_buffer(std::size_t count) : storage(count + 1, T(3)) {}
  T* at(std::size_t offset) {
    return reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(storage.data()) + offset);
  }
};

/// A finite gradient value that momentum_failing_late refuses (a NaN would be stopped before
/// the update by the worker's non-finite policy).
constexpr float poison = 1e30f;

/// Momentum whose update throws on a poisoned gradient after it has changed the parameters
/// and the velocity: the worst a failing update can leave behind.
struct momentum_failing_late {
  ho::momentum inner{ho::momentum_config{.lr = 0.05}};
  template <class E, class T>
  auto init(const E& e, hg::span<T> p) const {
    return inner.init(e, p);
  }
  template <class E, class G, class S, class P>
  void update(const E& e, G g, S& st, P p) const {
    inner.update(e, g, st, p);
    for (auto v : g)
      if (v == poison) throw std::invalid_argument("momentum_failing_late: poisoned gradient");
  }
};

using failing_worker = hs::local_sgd_worker<float, momentum_failing_late, hc::inproc::communicator>;

/// Everything a local SGD worker holds, bitwise.
bool same_worker(const failing_worker& a, const failing_worker& b) {
  return a.optimizer_state() == b.optimizer_state() && bitwise_equal(a.anchor(), b.anchor()) &&
         a.round() == b.round() && a.local_steps() == b.local_steps() &&
         a.steps_done() == b.steps_done();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(c_api)

using dtypes = std::tuple<float, double>;

BOOST_AUTO_TEST_CASE_TEMPLATE(every_optimizer_through_the_c_api_equals_the_cpp_optimizer_bitwise,
                              T, dtypes) {
  constexpr std::size_t n = 4099, steps = 7;
  for (std::int32_t kind = HG_OPTIMIZER_SGD; kind <= HG_OPTIMIZER_ADAMW; ++kind) {
    BOOST_TEST_CONTEXT("kind " << kind) {
      hg_optimizer_config c;
      BOOST_REQUIRE_EQUAL(hg_optimizer_config_init(&c, kind), HG_OK);
      c.lr = 0.01;
      c.weight_decay = 0.003;
      c.dampening = kind == HG_OPTIMIZER_MOMENTUM ? 0.1 : 0.0;
      auto p_c = random_vector<T>(n, 10);
      auto p_cpp = p_c;
      const auto g = random_vector<T>(n * steps, 11);

      hg_optimizer opt = nullptr;
      BOOST_REQUIRE_EQUAL(hg_optimizer_create(&opt, &c, dtype_of<T>(), n, HG_DEVICE_HOST), HG_OK);
      for (std::size_t s = 0; s < steps; ++s)
        BOOST_REQUIRE_EQUAL(hg_optimizer_step(opt, p_c.data(), g.data() + s * n, n, HG_DEVICE_HOST),
                            HG_OK);
      std::int64_t count = 0;
      BOOST_REQUIRE_EQUAL(hg_optimizer_step_count(opt, &count), HG_OK);
      BOOST_TEST(count == static_cast<std::int64_t>(steps));
      BOOST_REQUIRE_EQUAL(hg_optimizer_destroy(opt), HG_OK);

      // HG_DEVICE_HOST runs on the C API's host policy, also in a CUDA build (where the
      // default policy is the device's and would refuse host vectors).
      const auto& host = heterograd::c_api::detail::host_policy();
      with_cpp_optimizer(c, [&](const auto& o) {
        auto st = o.init(host, p_cpp);
        for (std::size_t s = 0; s < steps; ++s)
          o.update(host, hg::span<const T>(g.data() + s * n, n), st, hg::span<T>(p_cpp));
      });
      BOOST_TEST(bitwise_equal(p_c, p_cpp));
    }
  }
}

BOOST_AUTO_TEST_CASE(the_config_defaults_are_the_cpp_optimizers_defaults) {
  hg_optimizer_config c;
  BOOST_REQUIRE_EQUAL(hg_optimizer_config_init(&c, HG_OPTIMIZER_ADAM), HG_OK);
  const ho::adam_config a;
  BOOST_TEST(c.lr == a.lr(0));
  BOOST_TEST(c.beta1 == a.beta1);
  BOOST_TEST(c.beta2 == a.beta2);
  BOOST_TEST(c.eps == a.eps);
  BOOST_TEST(c.weight_decay == a.weight_decay);
  BOOST_TEST(c.bias_correction == 1);
  BOOST_REQUIRE_EQUAL(hg_optimizer_config_init(&c, HG_OPTIMIZER_ADAMW), HG_OK);
  BOOST_TEST(c.weight_decay == ho::adamw().params().weight_decay);
  BOOST_REQUIRE_EQUAL(hg_optimizer_config_init(&c, HG_OPTIMIZER_MOMENTUM), HG_OK);
  BOOST_TEST(c.momentum == ho::momentum_config{}.momentum);
  BOOST_TEST(c.lr == ho::momentum_config{}.lr(0));
}

BOOST_FIXTURE_TEST_CASE(null_pointers_return_null_pointer_errors_and_change_nothing,
                        adam_fixture) {
  const auto p0 = p;
  const auto st0 = state();
  hg_optimizer_config c;
  hg_optimizer_config_init(&c, HG_OPTIMIZER_ADAM);
  hg_optimizer other = nullptr;
  BOOST_TEST(hg_optimizer_create(nullptr, &c, HG_FLOAT32, n, HG_DEVICE_HOST) == HG_ERROR_NULL_POINTER);
  BOOST_TEST(message().find("'out'") != std::string::npos);
  BOOST_TEST(hg_optimizer_create(&other, nullptr, HG_FLOAT32, n, HG_DEVICE_HOST) == HG_ERROR_NULL_POINTER);
  BOOST_TEST(other == nullptr);
  BOOST_TEST(hg_optimizer_config_init(nullptr, HG_OPTIMIZER_SGD) == HG_ERROR_NULL_POINTER);
  BOOST_TEST(hg_optimizer_step(opt, nullptr, g.data(), n, HG_DEVICE_HOST) == HG_ERROR_NULL_POINTER);
  BOOST_TEST(message() ==
             "hg_optimizer_step: heterograd: invalid argument 'params' = null: must not be null");
  BOOST_TEST(hg_optimizer_step(opt, p.data(), nullptr, n, HG_DEVICE_HOST) == HG_ERROR_NULL_POINTER);
  BOOST_TEST(message().find("'grads'") != std::string::npos);
  BOOST_TEST(hg_optimizer_step_count(opt, nullptr) == HG_ERROR_NULL_POINTER);
  BOOST_TEST(hg_optimizer_save_state(opt, nullptr, 0, nullptr) == HG_ERROR_NULL_POINTER);
  BOOST_TEST(hg_optimizer_load_state(opt, nullptr, 10) == HG_ERROR_NULL_POINTER);
  BOOST_TEST(bitwise_equal(p, p0));
  BOOST_TEST(steps() == 1);
  BOOST_TEST((state() == st0));
}

BOOST_FIXTURE_TEST_CASE(a_size_mismatch_returns_size_mismatch_and_changes_nothing, adam_fixture) {
  const auto p0 = p;
  const auto st0 = state();
  for (std::size_t wrong : {std::size_t{0}, n - 1, n + 1}) {
    BOOST_TEST(hg_optimizer_step(opt, p.data(), g.data(), wrong, HG_DEVICE_HOST) ==
               HG_ERROR_SIZE_MISMATCH);
    BOOST_TEST(message() == "hg_optimizer_step: heterograd: invalid argument 'size' = " +
                                std::to_string(wrong) +
                                ": must equal the handle's size (1000 elements)");
  }
  BOOST_TEST(bitwise_equal(p, p0));
  BOOST_TEST(steps() == 1);
  BOOST_TEST((state() == st0));
  // A saved state of another size does not load.
  hg_optimizer_config c;
  hg_optimizer_config_init(&c, HG_OPTIMIZER_ADAM);
  hg_optimizer small = nullptr;
  BOOST_REQUIRE_EQUAL(hg_optimizer_create(&small, &c, HG_FLOAT32, n / 2, HG_DEVICE_HOST), HG_OK);
  BOOST_TEST(hg_optimizer_load_state(small, st0.data(), st0.size()) == HG_ERROR_INVALID_ARGUMENT);
  BOOST_TEST(message().find("size") != std::string::npos);
  BOOST_TEST(hg_optimizer_destroy(small) == HG_OK);
}

BOOST_FIXTURE_TEST_CASE(unknown_destroyed_forged_and_null_handles_return_unknown_handle,
                        adam_fixture) {
  const auto p0 = p;
  hg_optimizer_config c;
  hg_optimizer_config_init(&c, HG_OPTIMIZER_SGD);
  hg_optimizer gone = nullptr;
  BOOST_REQUIRE_EQUAL(hg_optimizer_create(&gone, &c, HG_FLOAT32, n, HG_DEVICE_HOST), HG_OK);
  BOOST_REQUIRE_EQUAL(hg_optimizer_destroy(gone), HG_OK);
  // A destroyed handle, a handle that was never created (a pointer to something else), NULL.
  const std::vector<hg_optimizer> bad = {gone, reinterpret_cast<hg_optimizer>(p.data()),
                                         reinterpret_cast<hg_optimizer>(std::uintptr_t{0xdead}),
                                         nullptr};
  for (hg_optimizer h : bad) {
    BOOST_TEST(hg_optimizer_step(h, p.data(), g.data(), n, HG_DEVICE_HOST) ==
               HG_ERROR_UNKNOWN_HANDLE);
    BOOST_TEST(message().find("is not a live hg_optimizer") != std::string::npos);
    std::int64_t k = -1;
    BOOST_TEST(hg_optimizer_step_count(h, &k) == HG_ERROR_UNKNOWN_HANDLE);
    BOOST_TEST(k == -1);
    BOOST_TEST(hg_optimizer_set_lr(h, 0.1) == HG_ERROR_UNKNOWN_HANDLE);
  }
  BOOST_TEST(hg_optimizer_destroy(gone) == HG_ERROR_UNKNOWN_HANDLE);  // twice
  BOOST_TEST(hg_optimizer_destroy(nullptr) == HG_OK);
  BOOST_TEST(bitwise_equal(p, p0));
  BOOST_TEST(steps() == 1);
}

BOOST_FIXTURE_TEST_CASE(bad_options_return_invalid_argument_naming_the_field, adam_fixture) {
  hg_optimizer_config c;
  hg_optimizer_config_init(&c, HG_OPTIMIZER_ADAM);
  hg_optimizer h = nullptr;
  c.beta1 = 1.0;
  BOOST_TEST(hg_optimizer_create(&h, &c, HG_FLOAT32, n, HG_DEVICE_HOST) == HG_ERROR_INVALID_ARGUMENT);
  BOOST_TEST(message() == "hg_optimizer_create: heterograd: invalid argument 'adam.beta1' = 1: "
                          "must be in [0, 1)");
  BOOST_TEST(h == nullptr);
  hg_optimizer_config_init(&c, HG_OPTIMIZER_ADAM);
  c.kind = 17;
  BOOST_TEST(hg_optimizer_create(&h, &c, HG_FLOAT32, n, HG_DEVICE_HOST) == HG_ERROR_INVALID_ARGUMENT);
  BOOST_TEST(hg_optimizer_config_init(&c, -1) == HG_ERROR_INVALID_ARGUMENT);
  hg_optimizer_config_init(&c, HG_OPTIMIZER_ADAM);
  BOOST_TEST(hg_optimizer_create(&h, &c, 7, n, HG_DEVICE_HOST) == HG_ERROR_INVALID_ARGUMENT);
  BOOST_TEST(message().find("'dtype' = 7") != std::string::npos);
  BOOST_TEST(hg_optimizer_create(&h, &c, HG_FLOAT32, 0, HG_DEVICE_HOST) == HG_ERROR_INVALID_ARGUMENT);
  BOOST_TEST(hg_optimizer_create(&h, &c, HG_FLOAT32, n, 5) == HG_ERROR_INVALID_ARGUMENT);
  BOOST_TEST(h == nullptr);
  // The learning rate is validated before it replaces the old one.
  const auto p0 = p;
  BOOST_TEST(hg_optimizer_set_lr(opt, -1.0) == HG_ERROR_INVALID_ARGUMENT);
  BOOST_TEST(message().find("adam.lr") != std::string::npos);
  // A step on another device than the optimizer's, and grads partly overlapping params.
  BOOST_TEST(hg_optimizer_step(opt, p.data(), g.data(), n, HG_DEVICE_CUDA) ==
             HG_ERROR_INVALID_ARGUMENT);
  std::vector<float> both(n + 1);
  BOOST_TEST(hg_optimizer_step(opt, both.data(), both.data() + 1, n, HG_DEVICE_HOST) ==
             HG_ERROR_INVALID_ARGUMENT);
  BOOST_TEST(message().find("overlap") != std::string::npos);
  BOOST_TEST(bitwise_equal(p, p0));
  BOOST_TEST(steps() == 1);
  // Bytes that are not a state do not load.
  const std::vector<std::byte> junk(64, std::byte{7});
  BOOST_TEST(hg_optimizer_load_state(opt, junk.data(), junk.size()) == HG_ERROR_INVALID_ARGUMENT);
  std::size_t size = 0;
  BOOST_REQUIRE_EQUAL(hg_optimizer_save_state(opt, nullptr, 0, &size), HG_OK);
  std::vector<std::byte> small(size - 1);
  BOOST_TEST(hg_optimizer_save_state(opt, small.data(), small.size(), &size) ==
             HG_ERROR_INVALID_ARGUMENT);
  BOOST_TEST(steps() == 1);
}

BOOST_FIXTURE_TEST_CASE(misaligned_pointers_return_invalid_argument_and_change_nothing,
                        adam_fixture) {
  const auto p0 = p;
  const auto st0 = state();
  offset_buffer<float> buf(n);
  const auto untouched = buf.storage;
  for (std::size_t off : {1, 2, 3}) {
    BOOST_TEST_CONTEXT("offset " << off) {
      BOOST_TEST(hg_optimizer_step(opt, buf.at(off), g.data(), n, HG_DEVICE_HOST) ==
                 HG_ERROR_INVALID_ARGUMENT);
      BOOST_TEST(message().find("'params' = 0x") != std::string::npos, message());
      BOOST_TEST(message().find("must be aligned to 4 bytes (alignof(float))") != std::string::npos,
                 message());
      BOOST_TEST(hg_optimizer_step(opt, p.data(), buf.at(off), n, HG_DEVICE_HOST) ==
                 HG_ERROR_INVALID_ARGUMENT);
      BOOST_TEST(message().find("'grads'") != std::string::npos, message());
      // Out-parameters and structs too: alignof(int64_t), alignof(hg_optimizer).
      BOOST_TEST(hg_optimizer_step_count(opt, reinterpret_cast<std::int64_t*>(buf.at(off))) ==
                 HG_ERROR_INVALID_ARGUMENT);
      hg_optimizer_config c;
      hg_optimizer_config_init(&c, HG_OPTIMIZER_SGD);
      BOOST_TEST(hg_optimizer_create(reinterpret_cast<hg_optimizer*>(buf.at(off)), &c, HG_FLOAT32, n,
                                     HG_DEVICE_HOST) == HG_ERROR_INVALID_ARGUMENT);
      BOOST_TEST(hg_version(reinterpret_cast<int*>(buf.at(off)), nullptr, nullptr) ==
                 HG_ERROR_INVALID_ARGUMENT);
    }
  }
  BOOST_TEST(bitwise_equal(buf.storage, untouched));
  BOOST_TEST(bitwise_equal(p, p0));
  BOOST_TEST(steps() == 1);
  BOOST_TEST((state() == st0));
  // A float64 optimizer needs 8-byte alignment: 4 is not enough.
  hg_optimizer_config c;
  hg_optimizer_config_init(&c, HG_OPTIMIZER_ADAM);
  hg_optimizer d = nullptr;
  BOOST_REQUIRE_EQUAL(hg_optimizer_create(&d, &c, HG_FLOAT64, 8, HG_DEVICE_HOST), HG_OK);
  offset_buffer<double> p64(8), g64(8);
  BOOST_TEST(hg_optimizer_step(d, p64.at(4), g64.at(0), 8, HG_DEVICE_HOST) == HG_ERROR_INVALID_ARGUMENT);
  BOOST_TEST(message().find("must be aligned to 8 bytes (alignof(double))") != std::string::npos,
             message());
  std::int64_t k = -1;
  BOOST_REQUIRE_EQUAL(hg_optimizer_step_count(d, &k), HG_OK);
  BOOST_TEST(k == 0);
  BOOST_REQUIRE_EQUAL(hg_optimizer_step(d, p64.at(0), g64.at(0), 8, HG_DEVICE_HOST), HG_OK);
  BOOST_TEST(hg_optimizer_destroy(d) == HG_OK);
}

BOOST_AUTO_TEST_CASE(size_max_and_byte_counts_that_overflow_are_one_error_for_every_optimizer) {
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  constexpr auto most = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());
  for (std::int32_t dtype : {HG_FLOAT32, HG_FLOAT64}) {
    const std::size_t bytes = dtype == HG_FLOAT64 ? 8 : 4;
    // SIZE_MAX; the first count whose bytes overflow size_t; the first past ptrdiff_t.
    for (std::size_t size : {max, max / bytes + 1, most / bytes + 1}) {
      const std::string expected =
          "hg_optimizer_create: heterograd: invalid argument 'size' = " + std::to_string(size) +
          ": must be in [1, " + std::to_string(most / bytes) + "]: its byte count (size x " +
          std::to_string(bytes) + ") must fit in ptrdiff_t";
      for (std::int32_t kind = HG_OPTIMIZER_SGD; kind <= HG_OPTIMIZER_ADAMW; ++kind) {
        BOOST_TEST_CONTEXT("dtype " << dtype << ", size " << size << ", kind " << kind) {
          hg_optimizer_config c;
          hg_optimizer_config_init(&c, kind);
          hg_optimizer h = nullptr;
          BOOST_TEST(hg_optimizer_create(&h, &c, dtype, size, HG_DEVICE_HOST) ==
                     HG_ERROR_INVALID_ARGUMENT);
          BOOST_TEST(message() == expected);
          BOOST_TEST(h == nullptr);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_failing_local_sgd_step_leaves_params_and_the_worker_bitwise_unchanged) {
  // hg_local_sgd_step runs local_sgd_worker::step through step_or_nothing; here over inproc
  // ranks, with a poisoned gradient whose update fails after changing params and the velocity.
  constexpr std::size_t n = 257, period = 2, steps = 6;
  const auto p0 = random_vector<float>(n, 40);
  auto grad = [](int r, std::size_t s) {
    return random_vector<float>(n, 100 + 2 * s + static_cast<std::uint64_t>(r));
  };
  std::vector<std::vector<float>> ref(2), got(2);
  hc::inproc::spawn(2, [&](hc::inproc::communicator c) {
    auto p = p0;
    failing_worker w(c, momentum_failing_late{}, hg::span<float>(p), {1, 1}, {.period = period});
    for (std::size_t s = 0; s < steps; ++s) {
      const auto g = grad(c.rank(), s);
      hd::step_or_nothing(w, hg::span<float>(p), hg::span<const float>(g));
    }
    ref[static_cast<std::size_t>(c.rank())] = p;
  });
  std::vector<int> refused(2, 0), raw_changed(2, 0);
  hc::inproc::spawn(2, [&](hc::inproc::communicator c) {
    const auto r = static_cast<std::size_t>(c.rank());
    auto p = p0;
    failing_worker w(c, momentum_failing_late{}, hg::span<float>(p), {1, 1}, {.period = period});
    for (std::size_t s = 0; s < steps; ++s) {
      auto bad = grad(c.rank(), s);
      bad[n / 2] = poison;
      // Without the guarantee the failed update leaves changed parameters behind.
      {
        failing_worker raw = w;
        auto q = p;
        try {
          raw.step(hg::span<float>(q), hg::span<const float>(bad));
        } catch (const std::invalid_argument&) {
        }
        if (!bitwise_equal(q, p)) ++raw_changed[r];
      }
      const auto p_before = p;
      const failing_worker w_before = w;
      try {
        hd::step_or_nothing(w, hg::span<float>(p), hg::span<const float>(bad));
      } catch (const std::invalid_argument&) {
        ++refused[r];
      }
      if (!bitwise_equal(p, p_before) || !same_worker(w, w_before)) refused[r] = -1000;
      const auto g = grad(c.rank(), s);
      hd::step_or_nothing(w, hg::span<float>(p), hg::span<const float>(g));
    }
    got[r] = p;
  });
  for (std::size_t r = 0; r < 2; ++r) {
    BOOST_TEST(refused[r] == static_cast<int>(steps));
    BOOST_TEST(raw_changed[r] == static_cast<int>(steps));
    BOOST_TEST(bitwise_equal(got[r], ref[r]));  // the failed calls changed nothing at all
  }
}

BOOST_AUTO_TEST_CASE(a_local_sgd_step_whose_average_times_out_leaves_everything_unchanged) {
  constexpr std::size_t n = 129;
  const auto p0 = random_vector<float>(n, 50);
  const auto g = random_vector<float>(n, 51);
  std::atomic<bool> done{false};
  bool timed_out = false, unchanged = false;
  hc::inproc::spawn(2, [&](hc::inproc::communicator c) {
    auto p = p0;
    hs::worker_options o;
    o.timeout = hg::seconds(0.2);
    failing_worker w(c, momentum_failing_late{}, hg::span<float>(p), {1, 1}, {.period = 1}, {}, {}, o);
    if (c.rank() == 1) {  // never joins the average
      while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    const auto p_before = p;
    const failing_worker w_before = w;
    try {
      hd::step_or_nothing(w, hg::span<float>(p), hg::span<const float>(g));
    } catch (const hc::timeout_error&) {
      timed_out = true;
    }
    unchanged = bitwise_equal(p, p_before) && same_worker(w, w_before) && w.local_steps() == 0;
    done = true;
  });
  BOOST_TEST(timed_out);
  BOOST_TEST(unchanged);
}

BOOST_AUTO_TEST_CASE(the_message_is_per_thread_and_survives_successful_calls) {
  BOOST_TEST(hg_optimizer_step(nullptr, nullptr, nullptr, 1, HG_DEVICE_HOST) ==
             HG_ERROR_UNKNOWN_HANDLE);
  const std::string mine = message();
  std::string theirs = "unset";
  std::thread([&] { theirs = hg_last_error(); }).join();
  BOOST_TEST(theirs.empty());
  int major = -1;
  BOOST_TEST(hg_version(&major, nullptr, nullptr) == HG_OK);
  BOOST_TEST(major == HG_VERSION_MAJOR);
  BOOST_TEST(message() == mine);
  BOOST_TEST(std::string(hg_status_name(HG_ERROR_SIZE_MISMATCH)) == "HG_ERROR_SIZE_MISMATCH");
  BOOST_TEST(std::string(hg_status_name(1234)) == "unknown");
}

BOOST_AUTO_TEST_CASE(a_cuda_buffer_without_nvcc_is_unsupported_and_with_it_must_be_device_memory) {
  hg_optimizer_config c;
  hg_optimizer_config_init(&c, HG_OPTIMIZER_ADAM);
  hg_optimizer h = nullptr;
#if defined(__CUDACC__)
  BOOST_TEST(hg_has_cuda() == 1);
  BOOST_REQUIRE_EQUAL(hg_optimizer_create(&h, &c, HG_FLOAT32, 10, HG_DEVICE_CUDA), HG_OK);
  std::vector<float> host(10, 1.0f);
  BOOST_TEST(hg_optimizer_step(h, host.data(), host.data(), 10, HG_DEVICE_CUDA) ==
             HG_ERROR_INVALID_ARGUMENT);
  BOOST_TEST(message().find("must be CUDA device memory") != std::string::npos);
  BOOST_TEST(hg_optimizer_destroy(h) == HG_OK);
#else
  BOOST_TEST(hg_has_cuda() == 0);
  BOOST_TEST(hg_optimizer_create(&h, &c, HG_FLOAT32, 10, HG_DEVICE_CUDA) == HG_ERROR_UNSUPPORTED);
  BOOST_TEST(message().find("nvcc") != std::string::npos);
  BOOST_TEST(h == nullptr);
  BOOST_TEST(hg_optimizer_set_stream(reinterpret_cast<hg_optimizer>(std::uintptr_t{1} << 40),
                                     nullptr) == HG_ERROR_UNKNOWN_HANDLE);
#endif
}

BOOST_AUTO_TEST_CASE(a_saved_and_reloaded_state_continues_bitwise_like_an_uninterrupted_run) {
  constexpr std::size_t n = 513;
  hg_optimizer_config c;
  hg_optimizer_config_init(&c, HG_OPTIMIZER_ADAMW);
  auto a = random_vector<double>(n, 20);
  auto b = a;
  const auto g = random_vector<double>(n * 4, 21);
  hg_optimizer x = nullptr, y = nullptr;
  BOOST_REQUIRE_EQUAL(hg_optimizer_create(&x, &c, HG_FLOAT64, n, HG_DEVICE_HOST), HG_OK);
  BOOST_REQUIRE_EQUAL(hg_optimizer_create(&y, &c, HG_FLOAT64, n, HG_DEVICE_HOST), HG_OK);
  for (std::size_t s = 0; s < 2; ++s) {
    hg_optimizer_step(x, a.data(), g.data() + s * n, n, HG_DEVICE_HOST);
    hg_optimizer_step(y, b.data(), g.data() + s * n, n, HG_DEVICE_HOST);
  }
  std::size_t size = 0;
  BOOST_REQUIRE_EQUAL(hg_optimizer_save_state(x, nullptr, 0, &size), HG_OK);
  std::vector<std::byte> bytes(size);
  BOOST_REQUIRE_EQUAL(hg_optimizer_save_state(x, bytes.data(), size, &size), HG_OK);
  BOOST_REQUIRE_EQUAL(hg_optimizer_destroy(y), HG_OK);
  BOOST_REQUIRE_EQUAL(hg_optimizer_create(&y, &c, HG_FLOAT64, n, HG_DEVICE_HOST), HG_OK);
  BOOST_REQUIRE_EQUAL(hg_optimizer_load_state(y, bytes.data(), size), HG_OK);
  b = a;
  for (std::size_t s = 2; s < 4; ++s) {
    hg_optimizer_step(x, a.data(), g.data() + s * n, n, HG_DEVICE_HOST);
    hg_optimizer_step(y, b.data(), g.data() + s * n, n, HG_DEVICE_HOST);
  }
  BOOST_TEST(bitwise_equal(a, b));
  // A float32 optimizer does not take a float64 state.
  hg_optimizer f = nullptr;
  BOOST_REQUIRE_EQUAL(hg_optimizer_create(&f, &c, HG_FLOAT32, n, HG_DEVICE_HOST), HG_OK);
  BOOST_TEST(hg_optimizer_load_state(f, bytes.data(), size) == HG_ERROR_INVALID_ARGUMENT);
  for (auto h : {x, y, f}) BOOST_TEST(hg_optimizer_destroy(h) == HG_OK);
}

BOOST_AUTO_TEST_CASE(set_lr_changes_the_learning_rate_of_the_following_steps_only) {
  constexpr std::size_t n = 64;
  hg_optimizer_config c;
  hg_optimizer_config_init(&c, HG_OPTIMIZER_SGD);
  c.lr = 0.5;
  std::vector<float> p(n, 1.0f), g(n, 1.0f);
  hg_optimizer h = nullptr;
  BOOST_REQUIRE_EQUAL(hg_optimizer_create(&h, &c, HG_FLOAT32, n, HG_DEVICE_HOST), HG_OK);
  BOOST_REQUIRE_EQUAL(hg_optimizer_step(h, p.data(), g.data(), n, HG_DEVICE_HOST), HG_OK);
  BOOST_TEST(p[0] == 0.5f);  // 1 - 0.5 * 1, exact
  BOOST_REQUIRE_EQUAL(hg_optimizer_set_lr(h, 0.25), HG_OK);
  BOOST_REQUIRE_EQUAL(hg_optimizer_step(h, p.data(), g.data(), n, HG_DEVICE_HOST), HG_OK);
  BOOST_TEST(p[n - 1] == 0.25f);
  BOOST_REQUIRE_EQUAL(hg_optimizer_destroy(h), HG_OK);
}

// ---- the C defaults and ranges are the C++ structs' -----------------------------------------

/// The C++ optimizer of each hg_optimizer_kind, with its default hyper-parameters.
template <class F>
void with_default_cpp_optimizer(std::int32_t kind, F&& f) {
  switch (kind) {
    case HG_OPTIMIZER_SGD: f(ho::sgd()); break;
    case HG_OPTIMIZER_MOMENTUM: f(ho::momentum()); break;
    case HG_OPTIMIZER_NESTEROV: f(ho::nesterov()); break;
    case HG_OPTIMIZER_ADAM: f(ho::adam()); break;
    default: f(ho::adamw()); break;
  }
}

BOOST_AUTO_TEST_CASE(every_c_default_equals_the_cpp_structs_default_field_by_field) {
  for (std::int32_t kind = HG_OPTIMIZER_SGD; kind <= HG_OPTIMIZER_ADAMW; ++kind) {
    BOOST_TEST_CONTEXT("kind " << kind) {
      hg_optimizer_config c;
      BOOST_REQUIRE_EQUAL(hg_optimizer_config_init(&c, kind), HG_OK);
      BOOST_TEST(c.kind == kind);
      with_default_cpp_optimizer(kind, [&](const auto& o) {
        const auto& p = o.params();
        using params_t = std::remove_cvref_t<decltype(p)>;
        BOOST_TEST(c.lr == p.lr(0));
        BOOST_TEST(c.weight_decay == p.weight_decay);
        if constexpr (std::is_same_v<params_t, ho::momentum_config>) {
          BOOST_TEST(c.momentum == p.momentum);
          BOOST_TEST(c.dampening == p.dampening);
        }
        if constexpr (std::is_same_v<params_t, ho::adam_config>) {
          BOOST_TEST(c.beta1 == p.beta1);
          BOOST_TEST(c.beta2 == p.beta2);
          BOOST_TEST(c.eps == p.eps);
          BOOST_TEST(c.bias_correction == (p.bias_correction ? 1 : 0));
        }
      });
    }
  }
  hg_local_sgd_config l;
  BOOST_REQUIRE_EQUAL(hg_local_sgd_config_init(&l), HG_OK);
  const hs::local_sgd_config s;
  BOOST_TEST(l.period == s.period);
  BOOST_TEST(l.warmup_steps == s.warmup_steps);
  BOOST_TEST(l.weighting == HG_AVERAGING_UNIFORM);
  BOOST_TEST((s.weighting == hs::averaging::uniform));
  BOOST_TEST(l.state_policy == HG_STATE_KEEP_LOCAL);
  BOOST_TEST((s.states == hs::state_policy::keep_local));
  BOOST_TEST(l.timeout_seconds == hs::worker_options{}.timeout.count());
  hg_async_config a;
  BOOST_REQUIRE_EQUAL(hg_async_config_init(&a), HG_OK);
  const hr::remote_options r;
  BOOST_TEST(a.policy == HG_ASYNC_ASGD);
  BOOST_TEST(a.server_rank == r.server_rank);
  BOOST_TEST(a.timeout_seconds == r.timeout.count());
  BOOST_TEST(a.tag_base == r.tag_base);
  BOOST_TEST(a.max_updates == 1000u);  // the C API's own: remote_options has no bound
  BOOST_TEST(a.reserved == 0);
}

BOOST_AUTO_TEST_CASE(the_defaults_docs_integration_md_states_are_the_cpp_structs_defaults) {
  // docs/integration.md, "The C API": if a C++ default changes, this fails until the docs
  // say the new value.
  const ho::adam_config adam;
  BOOST_TEST(adam.lr(0) == 1e-3);
  BOOST_TEST(adam.beta1 == 0.9);
  BOOST_TEST(adam.beta2 == 0.999);
  BOOST_TEST(adam.eps == 1e-8);
  BOOST_TEST(ho::adamw().params().weight_decay == 0.01);
  BOOST_TEST(ho::momentum_config{}.momentum == 0.9);
  BOOST_TEST(hs::local_sgd_config{}.period == 8u);
  BOOST_TEST(hs::worker_options{}.timeout.count() == 60.0);
  const hr::remote_options r;
  BOOST_TEST(r.server_rank == 0);
  BOOST_TEST(r.timeout.count() == 120.0);
  BOOST_TEST(r.tag_base == 30000);
}

BOOST_AUTO_TEST_CASE(a_bad_value_of_every_optimizer_field_is_refused_with_the_cpp_message) {
  // Each field a kind uses, with values its C++ constructor refuses: the C API refuses them
  // with the C++ optimizer's own message, which names the field (`adam.beta1`).
  using field = double hg_optimizer_config::*;
  const std::vector<std::pair<field, const char*>> all = {
      {&hg_optimizer_config::lr, "lr"},
      {&hg_optimizer_config::weight_decay, "weight_decay"},
      {&hg_optimizer_config::momentum, "momentum"},
      {&hg_optimizer_config::dampening, "dampening"},
      {&hg_optimizer_config::beta1, "beta1"},
      {&hg_optimizer_config::beta2, "beta2"},
      {&hg_optimizer_config::eps, "eps"}};
  const char* names[] = {"sgd", "momentum", "nesterov", "adam", "adamw"};
  for (std::int32_t kind = HG_OPTIMIZER_SGD; kind <= HG_OPTIMIZER_ADAMW; ++kind) {
    const bool adam_like = kind >= HG_OPTIMIZER_ADAM;
    const bool momentum_like = kind == HG_OPTIMIZER_MOMENTUM || kind == HG_OPTIMIZER_NESTEROV;
    for (const auto& [member, name] : all) {
      const std::string n = name;
      const bool used = n == "lr" || n == "weight_decay" ||
                        (momentum_like && (n == "momentum" || n == "dampening")) ||
                        (adam_like && (n == "beta1" || n == "beta2" || n == "eps"));
      if (!used) continue;
      for (double bad : {-1.0, std::numeric_limits<double>::quiet_NaN(), 7.0}) {
        BOOST_TEST_CONTEXT(names[kind] << "." << name << " = " << bad) {
          hg_optimizer_config c;
          BOOST_REQUIRE_EQUAL(hg_optimizer_config_init(&c, kind), HG_OK);
          c.*member = bad;
          std::string cpp_message;
          try {
            with_cpp_optimizer(c, [](const auto&) {});
          } catch (const std::invalid_argument& e) {
            cpp_message = e.what();
          }
          hg_optimizer h = nullptr;
          const hg_status s = hg_optimizer_create(&h, &c, HG_FLOAT32, 8, HG_DEVICE_HOST);
          if (cpp_message.empty()) {  // a value this field allows (7 for lr, eps, weight_decay)
            BOOST_TEST(s == HG_OK);
            BOOST_TEST(hg_optimizer_destroy(h) == HG_OK);
            continue;
          }
          BOOST_TEST(s == HG_ERROR_INVALID_ARGUMENT);
          BOOST_TEST(h == nullptr);
          BOOST_TEST(message() == "hg_optimizer_create: " + cpp_message);
          BOOST_TEST(message().find(std::string("'") + names[kind] + "." + name + "'") !=
                     std::string::npos);
        }
      }
    }
  }
  // An unused field is ignored, whatever its value.
  hg_optimizer_config c;
  BOOST_REQUIRE_EQUAL(hg_optimizer_config_init(&c, HG_OPTIMIZER_SGD), HG_OK);
  c.beta1 = -1.0;
  hg_optimizer h = nullptr;
  BOOST_TEST(hg_optimizer_create(&h, &c, HG_FLOAT32, 8, HG_DEVICE_HOST) == HG_OK);
  BOOST_TEST(hg_optimizer_destroy(h) == HG_OK);
}

BOOST_AUTO_TEST_CASE(a_bad_async_config_is_refused_naming_the_field_before_mpi_is_needed) {
  const auto refused = [](void (*spoil)(hg_async_config&), const std::string& field) {
    hg_async_config a;
    BOOST_REQUIRE_EQUAL(hg_async_config_init(&a), HG_OK);
    spoil(a);
    hg_async_worker w = nullptr;
    BOOST_TEST(hg_async_worker_create_mpi(&w, 0, &a, HG_FLOAT32, 8) == HG_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(message().find("'" + field + "'") != std::string::npos, message());
    BOOST_TEST(w == nullptr);
  };
  refused([](hg_async_config& a) { a.policy = 3; }, "config.policy");
  refused([](hg_async_config& a) { a.server_rank = -1; }, "config.server_rank");
  refused([](hg_async_config& a) { a.timeout_seconds = 0; }, "config.timeout_seconds");
  refused([](hg_async_config& a) { a.max_updates = 0; }, "remote_options.max_updates");
  refused([](hg_async_config& a) { a.tag_base = -1; }, "remote_options.tag_base");
}

#if defined(__CUDACC__)
BOOST_AUTO_TEST_CASE(a_device_step_through_the_c_api_equals_the_cpp_device_step_bitwise) {
  constexpr std::size_t n = 100003, steps = 5;
  const auto p_host = random_vector<float>(n, 30);
  const auto g_host = random_vector<float>(n * steps, 31);
  thrust::device_vector<float> p_c(p_host.begin(), p_host.end()), p_cpp = p_c;
  thrust::device_vector<float> g(g_host.begin(), g_host.end());
  hg_optimizer_config c;
  hg_optimizer_config_init(&c, HG_OPTIMIZER_ADAM);
  hg_optimizer h = nullptr;
  BOOST_REQUIRE_EQUAL(hg_optimizer_create(&h, &c, HG_FLOAT32, n, HG_DEVICE_CUDA), HG_OK);
  cudaStream_t stream = nullptr;
  BOOST_REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  BOOST_REQUIRE_EQUAL(hg_optimizer_set_stream(h, stream), HG_OK);
  float* pc = thrust::raw_pointer_cast(p_c.data());
  const float* gd = thrust::raw_pointer_cast(g.data());
  for (std::size_t s = 0; s < steps; ++s)
    BOOST_REQUIRE_EQUAL(hg_optimizer_step(h, pc, gd + s * n, n, HG_DEVICE_CUDA), HG_OK);
  BOOST_REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  BOOST_TEST(hg_optimizer_step(h, pc, gd, n, HG_DEVICE_HOST) == HG_ERROR_INVALID_ARGUMENT);
  const ho::adam o;
  auto st = o.init(thrust::cuda::par, p_cpp);
  for (std::size_t s = 0; s < steps; ++s)
    o.update(thrust::cuda::par, hg::span<const float, hg::device_space>(gd + s * n, n), st, p_cpp);
  BOOST_TEST(bitwise_equal(hg_test::to_host(p_c), hg_test::to_host(p_cpp)));
  BOOST_REQUIRE_EQUAL(hg_optimizer_destroy(h), HG_OK);
  cudaStreamDestroy(stream);
}
#endif

BOOST_AUTO_TEST_SUITE_END()
