#pragma once
// A transport built from sub-groups on their own backends (Zhu et al., "Joint training on AMD
// and NVIDIA GPUs", #4: a backend per process group, host staging across vendors, multi-NIC
// striping). Each rank belongs to an inner group (threads of one process over inproc, GPUs of
// one vendor over NCCL); the inner groups' leaders (inner rank 0) form the outer group (MPI
// across processes or nodes). Collectives are hierarchical:
//   allreduce   reduce inside (an inner allreduce), exchange across (the leaders' outer
//               allreduce, striped over `rails` outer channels), broadcast inside;
//   broadcast   inside the root's group to its leader, across the leaders, then inside;
//   allgather   inside, across (groups of equal size), then broadcast inside;
//   barrier     inside, across, inside.
// Global ranks number the groups in outer-rank order: group g's ranks follow those of groups
// 0..g-1. Integer results equal a flat allreduce's bit for bit; floating-point ones equal it
// up to the order of summation (groups first).
//
// Host staging: when the buffer lives in device memory and the outer backend reads host
// memory only (MPI without GPU support across vendors), the leader copies its group's result
// to a host buffer, runs the outer exchange there, and copies back: 2 S bytes over PCIe per
// exchange, on the leader only. The copies are the Stager's (host_stager: memcpy; under CUDA,
// comm/staging.cuh's cuda_stager: cudaMemcpy). `composite_config::stage` forces staging for
// host buffers too (tests, or a NIC that needs pinned bounce buffers).
//
// Striping: an outer exchange of at least `stripe_min_bytes` is cut into `rails` contiguous
// pieces (64-byte aligned), each allreduced on its own outer communicator (a split of the
// outer group: its own MPI communicator, hence its own progress and, with one NIC per rail,
// its own link), all in flight at once.
//
// The composite's operations run to completion when called (their requests are complete);
// errors of the parts are stored in the returned request and rethrown by wait().

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/comm/concepts.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::comm {

/// Copies between a buffer's memory and host memory for the outer exchange. For host buffers
/// a memcpy; counts the bytes it moved.
struct host_stager {
  std::shared_ptr<std::size_t> staged = std::make_shared<std::size_t>(0);
  template <class T>
  void to_host(span<const T, host_space> from, T* host) const {
    std::memcpy(host, from.data(), from.size_bytes());
    *staged += from.size_bytes();
  }
  template <class T>
  void from_host(const T* host, span<T, host_space> to) const {
    std::memcpy(to.data(), host, to.size_bytes());
    *staged += to.size_bytes();
  }
};

struct composite_config {
  /// Outer channels a large exchange is striped over.
  int rails = 1;
  /// Exchanges smaller than this use one rail.
  std::size_t stripe_min_bytes = 64 * 1024;
  /// Stage host buffers through a separate host buffer as well (device buffers always are).
  bool stage = false;
  seconds timeout = default_timeout;

  void validate() const {
    require(rails >= 1, "composite_config.rails", rails, "must be >= 1");
    require(timeout.count() > 0, "composite_config.timeout", timeout.count(), "must be > 0");
  }
};

template <class Inner, class Outer, class Stager = host_stager>
class composite {
 public:
  composite() = default;

  /// Collective over every rank of every group. `outer` is the leaders' transport, given on
  /// inner rank 0 only (elsewhere std::nullopt).
  static composite create(Inner inner, std::optional<Outer> outer, composite_config o = {},
                          Stager stager = {}) {
    o.validate();
    const bool leader = inner.rank() == 0;
    require(leader == outer.has_value(), "composite.outer", outer.has_value(),
            "must be given on inner rank 0 (the group's leader) and only there");
    composite c;
    auto s = std::make_shared<shared>();
    s->inner = std::move(inner);
    s->o = o;
    s->stager = std::move(stager);
    // Group sizes: the leaders allgather theirs, then each leader tells its group.
    std::uint64_t groups = 0;
    if (leader) {
      s->rails.push_back(*outer);
      groups = static_cast<std::uint64_t>(outer->size());
    }
    inner_broadcast_host(*s, span<std::uint64_t>(&groups, 1));
    std::vector<std::uint64_t> sizes(groups);
    if (leader) {
      const std::uint64_t mine = static_cast<std::uint64_t>(s->inner.size());
      outer->allgather(span<const std::uint64_t>(&mine, 1), span<std::uint64_t>(sizes),
                       allgather_options{o.timeout})
          .wait();
      // Rails: separate communicators over the same leaders.
      for (int k = 1; k < o.rails; ++k)
        s->rails.push_back(outer->split(0, outer->rank(), split_options{o.timeout}));
    }
    inner_broadcast_host(*s, span<std::uint64_t>(sizes));
    std::uint64_t group = leader ? static_cast<std::uint64_t>(outer->rank()) : 0;
    inner_broadcast_host(*s, span<std::uint64_t>(&group, 1));
    s->group = static_cast<int>(group);
    s->group_sizes.assign(sizes.begin(), sizes.end());
    s->first.assign(sizes.size() + 1, 0);
    for (std::size_t g = 0; g < sizes.size(); ++g) s->first[g + 1] = s->first[g] + static_cast<int>(sizes[g]);
    c.s_ = std::move(s);
    return c;
  }

  int rank() const { return s_->first[static_cast<std::size_t>(s_->group)] + s_->inner.rank(); }
  int size() const { return s_->first.back(); }
  int groups() const { return static_cast<int>(s_->group_sizes.size()); }
  int group() const { return s_->group; }
  bool leader() const { return s_->inner.rank() == 0; }
  const Inner& inner() const { return s_->inner; }
  /// The leaders' rails (empty off the leaders).
  const std::vector<Outer>& rails() const { return s_->rails; }
  const Stager& stager() const { return s_->stager; }

  /// Hierarchical allreduce (sum, avg, min, max; weights as in allreduce_options).
  template <class T, class Space>
  request allreduce(span<T, Space> data, const allreduce_options& o = {}) const {
    detail::validate(o);
    require(std::is_same_v<Space, host_space> || !o.weight, "composite.allreduce.weight", o.weight.value_or(0.0),
            "weights are supported on host buffers only");
    return run([&] {
      const bool avg = o.op == reduce_op::avg;
      const reduce_op op = avg ? reduce_op::sum : o.op;
      double weight_sum = static_cast<double>(size());
      if (o.weight) {
        // The divisor of a weighted average: the weights summed over every rank (host
        // transports; device groups pass no weight).
        if constexpr (std::is_same_v<Space, host_space>) {
          double w = *o.weight;
          allreduce(span<double>(&w, 1), allreduce_options{.op = reduce_op::sum, .timeout = o.timeout}).wait();
          weight_sum = w;
        }
      }
      allreduce_options in{.op = op, .weight = o.weight, .timeout = o.timeout};
      s_->inner.allreduce(data, in).wait();
      if (leader()) {
        outer_exchange(data, [&](span<T> host) {
          stripe(host, [&](const Outer& rail, span<T> piece) {
            return rail.allreduce(piece, allreduce_options{.op = op, .timeout = o.timeout});
          });
          if (avg) {
            const T d = static_cast<T>(weight_sum);
            for (auto& v : host) v = v / d;
          }
        });
      }
      s_->inner.broadcast(data, 0, broadcast_options{o.timeout}).wait();
    });
  }

  /// From global rank `root` to everybody.
  template <class T, class Space>
  request broadcast(span<T, Space> data, int root, const broadcast_options& o = {}) const {
    require_in_range_co("composite.broadcast.root", root, 0, size());
    return run([&] {
      const int rg = group_of(root);
      const int local_root = root - s_->first[static_cast<std::size_t>(rg)];
      if (s_->group == rg && local_root != 0)
        s_->inner.broadcast(data, local_root, o).wait();  // to the root group's leader
      if (leader()) {
        outer_exchange(data, [&](span<T> host) {
          s_->rails.front().broadcast(host, rg, broadcast_options{o.timeout}).wait();
        });
      }
      s_->inner.broadcast(data, 0, o).wait();
    });
  }

  /// out = every rank's `in` in global rank order (groups of equal size).
  template <class U, class T>
    requires std::same_as<std::remove_const_t<U>, T>
  request allgather(span<U, host_space> in, span<T, host_space> out, const allgather_options& o = {}) const {
    require_same_size("composite.allgather.out", out.size(), "size() * in.size()",
                      in.size() * static_cast<std::size_t>(size()));
    for (int g : s_->group_sizes)
      require(g == s_->group_sizes.front(), "composite.group_size", g,
              "must be the same in every group for allgather");
    return run([&] {
      const std::size_t gs = static_cast<std::size_t>(s_->inner.size()) * in.size();
      std::vector<T> mine(gs);
      s_->inner.allgather(in, span<T>(mine), o).wait();
      if (leader())
        s_->rails.front().allgather(span<const T>(mine), out, allgather_options{o.timeout}).wait();
      s_->inner.broadcast(out, 0, broadcast_options{o.timeout}).wait();
    });
  }

  /// out[i] = reduction of in[rank() * out.size() + i]: the full allreduce of a copy, then
  /// this rank's piece (the composite optimises allreduce; this is for completeness).
  template <class U, class T>
    requires std::same_as<std::remove_const_t<U>, T>
  request reduce_scatter(span<U, host_space> in, span<T, host_space> out,
                         const reduce_scatter_options& o = {}) const {
    require_same_size("composite.reduce_scatter.in", in.size(), "size() * out.size()",
                      out.size() * static_cast<std::size_t>(size()));
    return run([&] {
      std::vector<T> all(in.begin(), in.end());
      allreduce(span<T>(all), allreduce_options{.op = o.op, .timeout = o.timeout}).wait();
      std::copy_n(all.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(rank()) * out.size()),
                  out.size(), out.begin());
    });
  }

  request barrier(const barrier_options& o = {}) const {
    return run([&] {
      s_->inner.barrier(o).wait();
      if (leader()) s_->rails.front().barrier(o).wait();
      s_->inner.barrier(o).wait();
    });
  }

 private:
  struct shared {
    Inner inner{};
    std::vector<Outer> rails;
    composite_config o{};
    Stager stager{};
    int group = 0;
    std::vector<int> group_sizes;
    std::vector<int> first;
  };

  // The layout travels inside a group over the inner transport: directly when it takes host
  // buffers, else through the stager (a device bounce buffer for NCCL).
  static void inner_broadcast_host(shared& s, span<std::uint64_t> v) {
    const broadcast_options bo{s.o.timeout};
    if constexpr (requires(const Inner& i) { i.broadcast(v, 0, bo); })
      s.inner.broadcast(v, 0, bo).wait();
    else
      s.stager.broadcast_host(s.inner, v, 0, bo);
  }

  int group_of(int global) const {
    const auto it = std::upper_bound(s_->first.begin(), s_->first.end(), global);
    return static_cast<int>(it - s_->first.begin()) - 1;
  }

  template <class Fn>
  static request run(Fn&& fn) {
    try {
      fn();
    } catch (const std::invalid_argument&) {
      throw;
    } catch (...) {
      return request::failed(std::current_exception());
    }
    return request::completed();
  }

  // Runs fn on a host view of data: the buffer itself, or a staged host copy.
  template <class T, class Space, class Fn>
  void outer_exchange(span<T, Space> data, Fn&& fn) const {
    if constexpr (std::is_same_v<Space, host_space>) {
      if (!s_->o.stage) {
        fn(data);
        return;
      }
    }
    std::vector<T> host(data.size());
    s_->stager.to_host(span<const T, Space>(data), host.data());
    fn(span<T>(host));
    s_->stager.from_host(host.data(), data);
  }

  // Cuts a host buffer into rails pieces (64-byte aligned), posts each piece's operation on
  // its rail, then waits for all of them.
  template <class T, class Post>
  void stripe(span<T> host, Post&& post) const {
    const std::size_t k = host.size_bytes() >= s_->o.stripe_min_bytes ? s_->rails.size() : 1;
    const std::size_t line = std::max<std::size_t>(1, 64 / sizeof(T));
    const std::size_t lines = (host.size() + line - 1) / line;
    std::vector<request> reqs;
    for (std::size_t i = 0; i < k; ++i) {
      const std::size_t lo = std::min(host.size(), lines * i / k * line);
      const std::size_t hi = std::min(host.size(), lines * (i + 1) / k * line);
      if (hi > lo || (k == 1)) reqs.push_back(post(s_->rails[i], host.subspan(lo, hi - lo)));
    }
    wait_all(reqs);
  }

  std::shared_ptr<shared> s_{};
};

}  // namespace heterograd::comm
