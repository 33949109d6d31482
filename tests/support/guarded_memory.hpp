#pragma once
// An algorithm memory (kernels/memory.hpp) that emulates device memory on the CPU and counts
// every transfer. Its buffers live in their own pages, which are inaccessible (PROT_NONE)
// except while the memory runs a kernel (run, read) or makes a transfer (upload, download):
// an algorithm that touches its state from host code outside its memory's kernels faults,
// as it would on a GPU. Every upload, download and scalar read is counted, so a test can
// assert that a step makes no transfer beyond the scalars its algorithm documents.
// Kernels run with thrust::cpp::par (the pages are open while they run). POSIX only.

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include <thrust/system/cpp/execution_policy.h>

#include "heterograd/core/span.hpp"

namespace hg_test {

/// Every live guarded region and whether they are open (one registry for the process).
class guard_registry {
 public:
  static guard_registry& get() {
    static guard_registry r;
    return r;
  }
  void add(void* p, std::size_t bytes) {
    std::lock_guard<std::mutex> l(m_);
    regions_.push_back({p, bytes});
    protect(p, bytes, depth_ > 0);
  }
  void remove(void* p) {
    std::lock_guard<std::mutex> l(m_);
    std::erase_if(regions_, [&](const region& r) { return r.p == p; });
  }
  void open() {
    std::lock_guard<std::mutex> l(m_);
    if (depth_++ == 0)
      for (const auto& r : regions_) protect(r.p, r.bytes, true);
  }
  void close() {
    std::lock_guard<std::mutex> l(m_);
    if (--depth_ == 0)
      for (const auto& r : regions_) protect(r.p, r.bytes, false);
  }

 private:
  struct region {
    void* p;
    std::size_t bytes;
  };
  static void protect(void* p, std::size_t bytes, bool open) {
    if (::mprotect(p, bytes, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) throw std::bad_alloc();
  }
  std::mutex m_;
  std::vector<region> regions_;
  int depth_ = 0;
};

/// The pages are open while one of these lives.
struct guard_scope {
  guard_scope() { guard_registry::get().open(); }
  ~guard_scope() { guard_registry::get().close(); }
  guard_scope(const guard_scope&) = delete;
  guard_scope& operator=(const guard_scope&) = delete;
};

/// A fixed-size buffer in guarded pages (what guarded_memory::vector<T> is).
template <class T>
class guarded_vector {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  using value_type = T;

  guarded_vector() = default;
  guarded_vector(std::size_t n, T value) : n_(n) {
    allocate();
    guard_scope open;
    std::fill(p_, p_ + n_, value);
  }
  guarded_vector(const guarded_vector& o) : n_(o.n_) {
    allocate();
    guard_scope open;
    if (n_ > 0) std::memcpy(p_, o.p_, n_ * sizeof(T));
  }
  guarded_vector(guarded_vector&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)), bytes_(std::exchange(o.bytes_, 0)) {}
  guarded_vector& operator=(guarded_vector o) noexcept {
    swap(*this, o);
    return *this;
  }
  ~guarded_vector() {
    if (p_ == nullptr) return;
    guard_registry::get().remove(p_);
    ::munmap(p_, bytes_);
  }
  friend void swap(guarded_vector& a, guarded_vector& b) noexcept {
    std::swap(a.p_, b.p_);
    std::swap(a.n_, b.n_);
    std::swap(a.bytes_, b.bytes_);
  }

  T* data() { return p_; }
  const T* data() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  void allocate() {
    if (n_ == 0) return;
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    bytes_ = (n_ * sizeof(T) + page - 1) / page * page;
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    p_ = static_cast<T*>(p);
    guard_registry::get().add(p_, bytes_);
  }

  T* p_ = nullptr;
  std::size_t n_ = 0;
  std::size_t bytes_ = 0;
};

/// What a guarded_memory has done.
struct transfer_counts {
  std::size_t uploads = 0, downloads = 0, upload_bytes = 0, download_bytes = 0;
  std::size_t scalar_reads = 0;  ///< kernels that returned a host scalar (read())
  std::size_t kernels = 0;       ///< kernels run (run())
  std::size_t buffers = 0;       ///< buffers made (make(); upload<T>(host) counts as an upload)
  friend bool operator==(const transfer_counts&, const transfer_counts&) = default;
};

/// Emulated device memory: guarded buffers, counted transfers (see the top of this header).
class guarded_memory {
 public:
  using memory_space = heterograd::host_space;
  using policy_type = std::remove_cvref_t<decltype(thrust::cpp::par)>;
  template <class T>
  using vector = guarded_vector<T>;

  /// The counts so far (read them when no other thread uses the memory).
  const transfer_counts& counts() const { return *counts_; }
  void reset_counts() const {
    std::lock_guard<std::mutex> l(*counting_);
    *counts_ = {};
  }

  template <class T>
  vector<T> make(std::size_t n, T value = T(0)) const {
    count(&transfer_counts::buffers);
    return vector<T>(n, value);
  }
  template <class T>
  vector<T> upload(std::span<const T> host) const {
    count(&transfer_counts::uploads);
    count(&transfer_counts::upload_bytes, host.size_bytes());
    vector<T> v(host.size(), T(0));
    guard_scope open;
    if (!host.empty()) std::memcpy(v.data(), host.data(), host.size_bytes());
    return v;
  }
  template <class T>
  std::vector<std::remove_const_t<T>> download(heterograd::span<T, memory_space> s) const {
    count(&transfer_counts::downloads);
    count(&transfer_counts::download_bytes, s.size_bytes());
    std::vector<std::remove_const_t<T>> h(s.size());
    guard_scope open;
    if (!s.empty()) std::memcpy(h.data(), s.data(), s.size_bytes());
    return h;
  }
  template <class T>
  void upload(std::span<const T> host, heterograd::span<T, memory_space> to) const {
    if (to.size() != host.size()) throw std::invalid_argument("guarded_memory.upload: sizes differ");
    count(&transfer_counts::uploads);
    count(&transfer_counts::upload_bytes, host.size_bytes());
    guard_scope open;
    if (!host.empty()) std::memcpy(to.data(), host.data(), host.size_bytes());
  }
  template <class T>
  void download(heterograd::span<const T, memory_space> from, std::span<T> host) const {
    if (from.size() != host.size()) throw std::invalid_argument("guarded_memory.download: sizes differ");
    count(&transfer_counts::downloads);
    count(&transfer_counts::download_bytes, from.size_bytes());
    guard_scope open;
    if (!from.empty()) std::memcpy(host.data(), from.data(), from.size_bytes());
  }
  template <class F>
  decltype(auto) run(std::size_t, F&& f) const {
    count(&transfer_counts::kernels);
    guard_scope open;
    return std::forward<F>(f)(thrust::cpp::par);
  }
  template <class F>
  decltype(auto) read(std::size_t, F&& f) const {
    count(&transfer_counts::scalar_reads);
    guard_scope open;
    return std::forward<F>(f)(thrust::cpp::par);
  }

 private:
  // Several threads may share one memory (a module pipeline): the counts are kept under a lock.
  void count(std::size_t transfer_counts::*field, std::size_t by = 1) const {
    std::lock_guard<std::mutex> l(*counting_);
    (*counts_).*field += by;
  }

  std::shared_ptr<transfer_counts> counts_ = std::make_shared<transfer_counts>();
  std::shared_ptr<std::mutex> counting_ = std::make_shared<std::mutex>();
};

}  // namespace hg_test
