// Sharded training state with uneven shards (algorithms/sharded/): the layout's cuts, a
// sharded step against the replicated step (every rank allreduces the full gradient over the
// inproc transport, in rank order, and applies the optimizer to the full vector) bitwise for
// 2-5 ranks, equal and uneven fractions (with ranks of fraction 0) and every shardable
// optimizer; checkpoint and resume onto another layout against the uninterrupted run; the
// memory a layout needs and its refusal over a budget; hostile inputs.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/algorithms/sharded.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/core/archive.hpp"
#include "heterograd/core/clock.hpp"
#include "heterograd/core/rng.hpp"
#include "hg_test.hpp"

namespace hg = heterograd;
namespace hc = heterograd::comm;
namespace hi = heterograd::comm::inproc;
namespace hs = heterograd::algorithms::sharded;
namespace ho = heterograd::optim;

namespace {

std::vector<float> real_vector(std::uint64_t seed, std::uint64_t stream, std::size_t n) {
  const hg::counter_rng rng(seed, stream);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(rng.uniform(i, -1.0, 1.0));
  return v;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

/// Weights normalised to fractions: equal, uneven, and uneven with ranks of fraction 0 (one
/// inside, one last).
std::vector<std::vector<double>> fraction_sets(int n) {
  const double uneven[] = {1, 3, 2, 5, 4}, zeros[] = {2, 0, 1, 3, 0};
  std::vector<std::vector<double>> sets(3);
  for (int r = 0; r < n; ++r) {
    sets[0].push_back(1.0);
    sets[1].push_back(uneven[r]);
    sets[2].push_back(r == n - 1 && n > 2 ? 0.0 : zeros[r]);
  }
  for (auto& s : sets) {
    double sum = 0;
    for (double w : s) sum += w;
    for (double& w : s) w /= sum;
  }
  return sets;
}

// Buckets for the element-wise optimizers (a 1-element bucket, one past a chunk) and for
// LAMB (tensors of more than one lamb_chunk, so that cuts fall inside them).
const std::vector<std::size_t> kBuckets = {1000, 37, 2500, 1, 9000};
const std::vector<std::size_t> kLambBuckets = {20000, 300, 17000};

/// Every optimizer sharded_state takes (the element-wise ones and LAMB), with weight decay
/// and momentum switched on so that every term of each update runs.
auto every_optimizer() {
  return std::make_tuple(
      ho::sgd({.lr = 0.05, .weight_decay = 0.01}),
      ho::momentum({.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01}),
      ho::nesterov({.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01}),
      ho::adam({.lr = 0.01, .weight_decay = 0.01}), ho::adamw({.lr = 0.01, .weight_decay = 0.05}),
      ho::adagrad({.lr = 0.05, .weight_decay = 0.01, .lr_decay = 0.01, .initial_accumulator = 0.1}),
      ho::lamb({.lr = 0.01, .weight_decay = 0.01, .tensor_sizes = kLambBuckets}));
}

template <class O>
hs::layout layout_for(const std::vector<double>& fractions) {
  if constexpr (std::is_same_v<O, ho::lamb>)
    return hs::layout({fractions, kLambBuckets, hs::lamb_granularity});
  else
    return hs::layout({fractions, kBuckets, 1});
}

/// Rank r's gradient at step t: a function of the full parameters (so that a wrong parameter
/// changes every later step), different on every rank.
std::vector<float> gradient(std::uint64_t seed, int t, int r, const std::vector<float>& p) {
  auto g = real_vector(seed, 100 + 10 * static_cast<std::uint64_t>(t) + static_cast<std::uint64_t>(r), p.size());
  for (std::size_t i = 0; i < g.size(); ++i) g[i] += 0.5f * p[i];
  return g;
}

struct failures {
  std::mutex m;
  std::vector<std::string> list;
  void add(const std::string& s) {
    std::lock_guard<std::mutex> l(m);
    list.push_back(s);
  }
};

/// The state slots of a shard against the slices of the replicated state's.
bool same_state(const hs::layout& l, int r, const ho::state<float>& shard, const ho::state<float>& full) {
  if (shard.kind != full.kind || shard.count != full.count || shard.slots.size() != full.slots.size())
    return false;
  for (std::size_t k = 0; k < full.slots.size(); ++k) {
    for (const auto& s : l.segments(r)) {
      if (!same_bits(std::span<const float>(shard.slots[k].data() + s.local, s.count),
                     std::span<const float>(full.slots[k].data() + s.global, s.count)))
        return false;
    }
  }
  return true;
}

/// Runs `steps` sharded steps (per bucket, backward order, with a gather before each
/// bucket's reduction; or whole-model steps) next to the replicated run, on every rank.
template <class Backend, class O>
void check_against_replicated(const O& opt, const hs::layout& l, int steps, bool per_bucket,
                              failures& f, const std::string& label) {
  const auto seed = hg_test::seed();
  const auto policy = Backend::policy();
  hi::spawn(l.ranks(), [&](hi::communicator c) {
    const int r = c.rank();
    std::vector<float> rep = real_vector(seed, 7, l.size());
    hs::sharded_state<O> sh(opt, l, r, rep);
    auto rst = opt.init(policy, hg::span<const float>(rep.data(), rep.size()));
    std::vector<float> full(l.size(), std::nanf("")), bucket(l.largest_bucket());
    for (int t = 0; t < steps; ++t) {
      sh.gather_all(c, hg::span<float>(full.data(), full.size()));
      if (!same_bits(full, rep)) f.add(label + ": parameters differ before step " + std::to_string(t));
      auto g = gradient(seed, t, r, full);
      if (per_bucket) {
        for (std::size_t b = l.buckets(); b-- > 0;) {
          const hg::span<float> out(bucket.data(), l.bucket_size(b));
          std::fill(out.begin(), out.end(), std::nanf(""));
          sh.gather(c, b, out);  // the backward's gather, into the one reused buffer
          if (!same_bits(std::span<const float>(out.data(), out.size()),
                         std::span<const float>(rep.data() + l.bucket_offset(b), l.bucket_size(b))))
            f.add(label + ": bucket " + std::to_string(b) + " gathered wrong");
          sh.reduce_gradients(c, b, hg::span<const float>(g.data() + l.bucket_offset(b), l.bucket_size(b)));
        }
        sh.apply(policy, c);
      } else {
        sh.step(policy, c, hg::span<const float>(g.data(), g.size()));
      }
      c.allreduce(hg::span<float>(g.data(), g.size()), {.op = hc::reduce_op::avg}).wait();
      opt.update(policy, hg::span<const float>(g.data(), g.size()), rst, hg::span<float>(rep.data(), rep.size()));
      if (!same_state(l, r, sh.optimizer_state(), rst))
        f.add(label + ": optimizer state of rank " + std::to_string(r) + " differs after step " + std::to_string(t));
    }
    sh.gather_all(c, hg::span<float>(full.data(), full.size()));
    if (!same_bits(full, rep)) f.add(label + ": parameters differ at the end on rank " + std::to_string(r));
    if (sh.steps() != steps) f.add(label + ": step count");
  });
}

/// A dyadic gradient (k/64, |k| <= 64) of sample j at step t: sums of such values are exact in
/// float in any order, so the summed gradient is the same bits for any number of ranks.
std::vector<float> sample_gradient(std::uint64_t seed, int t, int j, std::size_t n) {
  const hg::counter_rng rng(seed, 5000 + 100 * static_cast<std::uint64_t>(t) + static_cast<std::uint64_t>(j));
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) g[i] = static_cast<float>(static_cast<int>(rng.below(i, 129)) - 64) / 64.0f;
  return g;
}

constexpr int kSamples = 12;

/// Steps [from, to) of a run whose rank r of n sums the gradients of samples j = r mod n;
/// returns every rank's shard at the end.
template <class O>
std::vector<hs::shard> run_steps(const O& opt, std::vector<hs::shard> start, int from, int to) {
  const auto seed = hg_test::seed();
  const int n = start[0].shard_layout.ranks();
  std::vector<hs::shard> end(static_cast<std::size_t>(n));
  hi::spawn(n, [&](hi::communicator c) {
    hs::sharded_state<O> sh(opt, start[static_cast<std::size_t>(c.rank())]);
    const std::size_t size = sh.shard_layout().size();
    for (int t = from; t < to; ++t) {
      std::vector<float> g(size, 0.0f);
      for (int j = c.rank(); j < kSamples; j += n) {
        const auto s = sample_gradient(seed, t, j, size);
        for (std::size_t i = 0; i < size; ++i) g[i] += s[i];
      }
      sh.step(thrust::cpp::par, c, hg::span<const float>(g.data(), g.size()), {.op = hc::reduce_op::sum});
    }
    end[static_cast<std::size_t>(c.rank())] = sh.save();
  });
  return end;
}

/// A shard through a sealed checkpoint file's bytes and back.
hs::shard through_checkpoint(const hs::shard& s) {
  hg::archive_writer w;
  w(s);
  const std::string file = hg::seal_checkpoint(w.bytes());
  const auto payload = hg::open_checkpoint("shard.ckpt", file);
  hs::shard back;
  hg::archive_reader rd(payload);
  rd(back);
  BOOST_TEST(rd.done());
  return back;
}

/// The shards of a run, all on one rank (the full vectors), to compare runs of any layout.
hs::shard whole(const std::vector<hs::shard>& shards) {
  const hs::layout one({{1.0}, {shards[0].shard_layout.size()}, 1});
  return hs::reshard(shards, one, 0);
}

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sharded)

BOOST_AUTO_TEST_CASE(layout_cuts_every_bucket_in_rank_order_by_the_fractions) {
  const hs::layout l({{0.5, 0.0, 0.25, 0.25, 0.0}, {10, 7, 1}, 1});
  BOOST_TEST(l.size() == 18u);
  BOOST_TEST(l.counts(0) == (std::vector<std::size_t>{5, 0, 2, 3, 0}), boost::test_tools::per_element());
  BOOST_TEST(l.counts(1) == (std::vector<std::size_t>{3, 0, 2, 2, 0}), boost::test_tools::per_element());
  BOOST_TEST(l.counts(2) == (std::vector<std::size_t>{0, 0, 0, 1, 0}), boost::test_tools::per_element());
  BOOST_TEST(l.shard_size(0) == 8u);
  BOOST_TEST(l.shard_size(1) == 0u);
  BOOST_TEST(l.shard_size(3) == 6u);
  BOOST_TEST(l.shard_size(4) == 0u);  // a last rank of fraction 0 gets nothing
  BOOST_TEST(l.shard_offset(1, 3) == 3u);
  BOOST_TEST(l.piece_offset(1, 3) == 5u);
  // Granularity: cuts inside a bucket at multiples of it.
  const hs::layout g({{0.3, 0.3, 0.4}, {100, 5}, 16});
  BOOST_TEST(g.counts(0) == (std::vector<std::size_t>{16, 32, 52}), boost::test_tools::per_element());
  BOOST_TEST(g.counts(1) == (std::vector<std::size_t>{0, 0, 5}), boost::test_tools::per_element());
  // Every element once, for every fraction set of 1-5 ranks.
  for (int n = 1; n <= 5; ++n) {
    for (const auto& fr : fraction_sets(n)) {
      const hs::layout x({fr, kBuckets, 1});
      std::vector<int> hits(x.size(), 0);
      for (int r = 0; r < n; ++r)
        for (const auto& s : x.segments(r))
          for (std::size_t i = 0; i < s.count; ++i) ++hits[s.global + i];
      BOOST_TEST(std::count(hits.begin(), hits.end(), 1) == static_cast<long>(x.size()));
      for (int r = 0; r < n; ++r)
        if (fr[static_cast<std::size_t>(r)] == 0.0) BOOST_TEST(x.shard_size(r) == 0u);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_cephalo_plan_becomes_a_layout_of_its_shard_units) {
  hg::balance::cephalo_plan plan;
  plan.devices.resize(3);
  plan.devices[0].shard_units = 600;
  plan.devices[1].shard_units = 0;
  plan.devices[2].shard_units = 400;
  const auto l = hs::layout::from_plan(plan, {1000, 10});
  BOOST_TEST(l.counts(0) == (std::vector<std::size_t>{600, 0, 400}), boost::test_tools::per_element());
  BOOST_TEST(l.counts(1) == (std::vector<std::size_t>{6, 0, 4}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_sharded_step_equals_the_replicated_step_bitwise_for_2_to_5_ranks_and_every_optimizer,
                              Backend, hg_test::backends) {
  failures f;
  std::apply(
      [&](const auto&... opts) {
        const auto one = [&](const auto& opt) {
          using O = std::remove_cvref_t<decltype(opt)>;
          for (int n = 2; n <= 5; ++n) {
            const auto sets = fraction_sets(n);
            for (std::size_t k = 0; k < sets.size(); ++k) {
              const auto l = layout_for<O>(sets[k]);
              const std::string label = std::string(O::name()) + " " + Backend::name + " n=" +
                                        std::to_string(n) + " fractions #" + std::to_string(k);
              check_against_replicated<Backend>(opt, l, 3, k != 1, f, label + " per bucket");
              if (k == 1) check_against_replicated<Backend>(opt, l, 3, false, f, label + " whole model");
            }
          }
        };
        (one(opts), ...);
      },
      every_optimizer());
  BOOST_TEST(f.list.empty(), f.list.size() << " mismatches; first: " << (f.list.empty() ? "" : f.list.front()));
}

BOOST_AUTO_TEST_CASE(lamb_cut_inside_its_tensors_exchanges_norms_and_equals_kernels_lamb_bitwise) {
  // The cuts of kLambBuckets with these fractions fall inside the first and last tensors: the
  // sharded trust ratios need the exchanged chunk norms (a rank's own norms alone differ).
  const auto l = layout_for<ho::lamb>({0.45, 0.45, 0.1});
  BOOST_TEST(l.piece_count(0, 0) == 8192u);
  BOOST_TEST(l.piece_count(2, 1) == 8192u);
  failures f;
  check_against_replicated<hg_test::cpp_backend>(std::get<6>(every_optimizer()), l, 4, true, f, "lamb");
  BOOST_TEST(f.list.empty(), (f.list.empty() ? "" : f.list.front()));
}

BOOST_AUTO_TEST_CASE(resume_onto_another_layout_equals_the_uninterrupted_run_bitwise) {
  // 3 uneven ranks for 3 steps, checkpointed (sealed bytes), then resumed on 4 ranks with
  // other fractions and buckets, and on 2 ranks with one of fraction 0, for 3 more steps;
  // the uninterrupted run takes 6 steps on the first layout. Gradients are dyadic, so their
  // sum is the same bits for any number of ranks.
  std::apply(
      [&](const auto&... opts) {
        const auto one = [&](const auto& opt) {
          using O = std::remove_cvref_t<decltype(opt)>;
          const bool lamb = std::is_same_v<O, ho::lamb>;
          const auto a = layout_for<O>({0.5, 0.2, 0.3});
          const auto b = lamb ? layout_for<O>({0.1, 0.4, 0.25, 0.25})
                              : hs::layout({{0.1, 0.4, 0.25, 0.25}, {5000, 7538}, 1});
          const auto c = layout_for<O>({0.0, 1.0});
          std::vector<float> init = real_vector(hg_test::seed(), 9, a.size());
          std::vector<hs::shard> start;
          for (int r = 0; r < a.ranks(); ++r) start.push_back(hs::sharded_state<O>(opt, a, r, init).save());
          const auto mid = run_steps(opt, start, 0, 3);
          const auto straight = whole(run_steps(opt, mid, 3, 6));
          std::vector<hs::shard> saved;
          for (const auto& s : mid) saved.push_back(through_checkpoint(s));
          for (const auto* to : {&b, &c}) {
            std::vector<hs::shard> resumed;
            for (int r = 0; r < to->ranks(); ++r) resumed.push_back(hs::reshard(saved, *to, r));
            const auto end = whole(run_steps(opt, resumed, 3, 6));
            BOOST_TEST(end.steps == 6);
            BOOST_TEST(same_bits(end.params, straight.params), O::name() << " onto " << to->ranks() << " ranks: parameters");
            BOOST_TEST((end.state == straight.state), O::name() << " onto " << to->ranks() << " ranks: optimizer state");
          }
        };
        (one(opts), ...);
      },
      every_optimizer());
}

BOOST_AUTO_TEST_CASE(reshard_refuses_shards_that_are_not_one_consistent_cut) {
  const hs::layout l({{0.5, 0.5}, {10}, 1});
  const std::vector<float> init(10, 1.0f);
  const ho::adam opt;
  std::vector<hs::shard> s = {hs::sharded_state<ho::adam>(opt, l, 0, init).save(),
                              hs::sharded_state<ho::adam>(opt, l, 1, init).save()};
  s[1].steps = 4;
  BOOST_TEST(error_of<std::invalid_argument>([&] { (void)hs::reshard(s, l, 0); }).find("reshard.shards[1].steps") !=
             std::string::npos);
  s[1].steps = 0;
  s[1].rank = 0;
  BOOST_TEST(error_of<std::invalid_argument>([&] { (void)hs::reshard(s, l, 0); }).find("each once") != std::string::npos);
  s[1].rank = 1;
  BOOST_TEST(error_of<std::invalid_argument>([&] { (void)hs::reshard(std::span<const hs::shard>(s.data(), 1), l, 0); })
                 .find("reshard.shards (size)") != std::string::npos);
  BOOST_TEST(error_of<std::invalid_argument>([&] { (void)hs::reshard(s, hs::layout({{1.0}, {11}, 1}), 0); })
                 .find("reshard.to (size)") != std::string::npos);
  s[0].state.slots[0].pop_back();
  BOOST_TEST(error_of<std::invalid_argument>([&] { (void)hs::reshard(s, l, 0); }).find("state.slots[] (size)") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(memory_per_rank_counts_shards_the_gathered_bucket_and_scratch_and_a_budget_refuses_by_name) {
  const hs::layout l({{0.5, 0.25, 0.25}, {1000, 3000}, 1});
  // Rank 0: 500 + 1500 elements; adam has 2 slots; the largest bucket is 3000 elements; its
  // largest piece (1500) is received from 2 peers in the reduce-scatter.
  const auto m = hs::memory_of<ho::adam>(l, 0);
  BOOST_TEST(m.parameters == 8000u);
  BOOST_TEST(m.gradients == 8000u);
  BOOST_TEST(m.optimizer_state == 16000u);
  BOOST_TEST(m.gathered == 12000u);
  BOOST_TEST(m.gradient_bucket == 12000u);
  BOOST_TEST(m.scratch == 12000u);
  BOOST_TEST(m.total() == 68000u);
  BOOST_TEST(hs::memory_of<ho::lamb>(l, 0).scratch == 12000u + 16000u);  // LAMB's slot copies
  const std::vector<hs::memory_budget> ok = {{"gpu-a", 68000}, {"gpu-b", 1 << 20}, {"gpu-c", 1 << 20}};
  hs::require_within_budget(l, ho::adam::state_slots, ok);
  const std::vector<hs::memory_budget> tight = {{"gpu-a", 67999}, {"gpu-b", 1 << 20}, {"gpu-c", 1 << 20}};
  const auto e = error_of<std::invalid_argument>([&] { hs::require_within_budget(l, ho::adam::state_slots, tight); });
  BOOST_TEST(e.find("memory_budgets[0] (worker 'gpu-a', bytes)' = 67999") != std::string::npos, e);
  BOOST_TEST(e.find("needs 68000 bytes") != std::string::npos, e);
  BOOST_TEST(e.find("by 1 bytes") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(hostile_layouts_and_calls_are_refused_naming_field_value_and_rule) {
  const auto refused = [](auto&& f, const std::string& field) {
    const auto e = error_of<std::invalid_argument>(f);
    BOOST_TEST(e.find(field) != std::string::npos, "expected '" << field << "' in: " << e);
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  refused([&] { hs::layout({{0.5, nan, 0.5}, {10}, 1}); }, "layout.fractions[1]' = nan");
  refused([&] { hs::layout({{0.5, -0.1, 0.6}, {10}, 1}); }, "layout.fractions[1]");
  refused([&] { hs::layout({{0.5, 0.4}, {10}, 1}); }, "layout.fractions (sum)' = 0.9");
  refused([&] { hs::layout({{}, {10}, 1}); }, "layout.fractions (size)");
  refused([&] { hs::layout({{1.0}, {10, 0}, 1}); }, "layout.bucket_sizes[1]");
  refused([&] { hs::layout({{1.0}, {}, 1}); }, "layout.bucket_sizes (size)");
  refused([&] { hs::layout({{1.0}, {10}, 0}); }, "layout.granularity");
  const hs::layout l({{0.5, 0.5}, {10, 6}, 1});
  const std::vector<float> init(16, 0.5f);
  refused([&] { hs::sharded_state<ho::sgd>(ho::sgd{}, l, 2, init); }, "sharded_state.rank");
  refused([&] { hs::sharded_state<ho::sgd>(ho::sgd{}, l, 0, std::vector<float>(15)); }, "sharded_state.initial");
  // LAMB: its tensors must be the buckets, cut at multiples of lamb_chunk.
  refused([&] { hs::sharded_state<ho::lamb>(ho::lamb{}, l, 0, init); }, "lamb.tensor_sizes");
  refused([&] { hs::sharded_state<ho::lamb>(ho::lamb({.tensor_sizes = {10, 6}}), l, 0, init); },
          "cut of bucket 0 before rank 1");
  // Another optimizer's state in a shard.
  auto s = hs::sharded_state<ho::adam>(ho::adam{}, l, 0, init).save();
  refused([&] { hs::sharded_state<ho::sgd>(ho::sgd{}, s); }, "sharded_state.shard.state.kind");
  // Steps out of order, on one rank: nothing changes when refused.
  hi::spawn(1, [&](hi::communicator c) {
    const hs::layout one({{1.0}, {10, 6}, 1});
    hs::sharded_state<ho::adam> st(ho::adam{}, one, 0, init);
    const auto before = st.save();
    const std::vector<float> g(10, 1.0f);
    st.reduce_gradients(c, 0, hg::span<const float>(g.data(), 10));
    refused([&] { st.apply(thrust::cpp::par, c); }, "sharded_state.apply (bucket 1)");
    refused([&] { st.reduce_gradients(c, 0, hg::span<const float>(g.data(), 10)); }, "already reduced");
    refused([&] { st.reduce_gradients(c, 1, hg::span<const float>(g.data(), 10)); }, "reduce_scatter_v.in");
    refused([&] { st.reduce_gradients(c, 2, hg::span<const float>(g.data(), 10)); }, "sharded_state.reduce_gradients.bucket");
    refused([&] { (void)st.save(); }, "between steps");
    refused([&] { st.reduce_gradients(c, 1, hg::span<const float>(g.data(), 6), {.op = hc::reduce_op::max}); },
            "step_options.op");
    BOOST_TEST((st.optimizer_state() == before.state));
    BOOST_TEST(same_bits(st.params(), before.params));
  });
}

BOOST_AUTO_TEST_CASE(ranks_whose_layouts_differ_fail_on_every_rank_with_a_mismatch) {
  // Rank 1 was given other fractions: the gather's count check fails on every rank, no hang.
  std::vector<int> threw(3, 0);
  hi::spawn(3, [&](hi::communicator c) {
    const hs::layout l({c.rank() == 1 ? std::vector<double>{0.4, 0.4, 0.2} : std::vector<double>{0.5, 0.3, 0.2},
                        {100}, 1});
    hs::sharded_state<ho::sgd> st(ho::sgd{}, l, c.rank(), std::vector<float>(100, 1.0f));
    std::vector<float> out(100);
    try {
      st.gather(c, 0, hg::span<float>(out.data(), out.size()), {.timeout = hg::seconds{20}});
    } catch (const hc::mismatch_error&) {
      threw[static_cast<std::size_t>(c.rank())] = 1;
    }
  });
  BOOST_TEST(threw == std::vector<int>(3, 1), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------------
// Training with a Cephalo plan (cephalo_run.hpp): an nn::mlp over inproc threads, each rank a_d
// micro-batches of m_d samples, the sample-weighted sum reduce-scattered into shards f_d.

namespace {

namespace hb = heterograd::balance;
namespace hn = heterograd::nn;

constexpr std::size_t kGlobal = 12;  // B

hn::mlp<float> cephalo_model() {
  return hn::mlp<float>({5, 7, 6, 3});
}

/// The B samples of step t (inputs in [-1, 1], labels in [0, 3)).
struct samples {
  std::vector<float> x;
  std::vector<std::int32_t> y;
  std::size_t width = 0;
  hn::batch<float> range(std::size_t begin, std::size_t end) const {
    return {hg::span<const float>(x.data() + begin * width, (end - begin) * width),
            hg::span<const std::int32_t>(y.data() + begin, end - begin)};
  }
  hn::batch<float> all() const { return range(0, y.size()); }
};

samples step_samples(int t, const hn::mlp<float>& model) {
  const hg::counter_rng rng(hg_test::seed(), 7000 + static_cast<std::uint64_t>(t));
  samples s;
  s.width = model.input_dim();
  s.x.resize(kGlobal * s.width);
  for (std::size_t i = 0; i < s.x.size(); ++i)
    s.x[i] = static_cast<float>(rng.uniform(i, -1.0, 1.0));
  for (std::size_t j = 0; j < kGlobal; ++j)
    s.y.push_back(static_cast<std::int32_t>(rng.below(1000000 + j, model.classes())));
  return s;
}

/// A plan of (m_d, a_d, f_d) per device.
hb::cephalo_plan make_plan(const std::vector<std::tuple<std::size_t, std::size_t, double>>& d) {
  hb::cephalo_plan p;
  for (const auto& [m, a, f] : d) {
    hb::device_plan x;
    x.micro_batch = m;
    x.accumulation = a;
    x.shard_fraction = f;
    p.devices.push_back(x);
  }
  return p;
}
// Planned: uneven micro-batches, accumulations and shards (a rank of fraction 0 still
// computes); even: the same m, a and f everywhere. Each covers B = 12 samples.
const hb::cephalo_plan kPlanned3 = make_plan({{2, 3, 0.2}, {1, 2, 0.5}, {4, 1, 0.3}});
const hb::cephalo_plan kEven3 = make_plan({{4, 1, 1.0 / 3}, {4, 1, 1.0 / 3}, {4, 1, 1.0 / 3}});
const hb::cephalo_plan kPlanned4 = make_plan({{3, 1, 0.4}, {1, 4, 0.1}, {2, 2, 0.0}, {1, 1, 0.5}});

std::vector<float> cephalo_init(const hn::mlp<float>& model) {
  std::vector<float> p(model.num_params());
  model.init(hg::span<float>(p.data(), p.size()), hg_test::seed() + 11);
  return p;
}

/// The step a Cephalo plan defines, computed sequentially in the order the header derives:
/// per device, its micro-batch mean gradients added in order, times float(m_d / B); the
/// devices' sums added in rank order (reduce_scatter_v's order); the optimizer on the whole
/// vector.
template <class O>
void reference_step(hn::mlp<float>& model, const O& opt, ho::state<float>& st,
                    std::vector<float>& p, const hb::cephalo_plan& plan, const samples& s) {
  const std::size_t n = p.size();
  std::vector<float> total(n), acc(n), g(n);
  const hg::span<const float> params(p.data(), n);
  std::size_t at = 0;
  for (std::size_t d = 0; d < plan.devices.size(); ++d) {
    const std::size_t m = plan.devices[d].micro_batch;
    for (std::size_t k = 0; k < plan.devices[d].accumulation; ++k, at += m) {
      model.loss_and_gradient(params, s.range(at, at + m), hg::span<float>(g.data(), n));
      for (std::size_t i = 0; i < n; ++i) acc[i] = k == 0 ? g[i] : acc[i] + g[i];
    }
    const auto w = static_cast<float>(static_cast<double>(m) / static_cast<double>(kGlobal));
    for (std::size_t i = 0; i < n; ++i) acc[i] *= w;
    for (std::size_t i = 0; i < n; ++i) total[i] = d == 0 ? acc[i] : total[i] + acc[i];
  }
  opt.update(thrust::cpp::par, hg::span<const float>(total.data(), n), st,
             hg::span<float>(p.data(), n));
}

/// Steps [from, to) of a Cephalo run of `plan` over inproc threads from `start` (every rank's
/// shard, of the plan's layout); `trace` receives the whole parameters after each step.
template <class O>
std::vector<hs::shard> cephalo_steps(const O& opt, const hb::cephalo_plan& plan,
                                     std::vector<hs::shard> start, int from, int to,
                                     std::vector<std::vector<float>>& trace) {
  const auto model = cephalo_model();
  const int n = static_cast<int>(plan.devices.size());
  std::vector<hs::shard> end(static_cast<std::size_t>(n));
  trace.assign(static_cast<std::size_t>(to - from), {});
  hi::spawn(n, [&](hi::communicator c) {
    hs::cephalo_worker<O> w(model, opt, plan, kGlobal, start[static_cast<std::size_t>(c.rank())]);
    std::vector<float> full(model.num_params());
    for (int t = from; t < to; ++t) {
      const auto s = step_samples(t, model);
      const auto [b, e] = w.samples();
      w.step(thrust::cpp::par, c, s.range(b, e));
      w.gather(c, hg::span<float>(full.data(), full.size()));
      if (c.rank() == 0) trace[static_cast<std::size_t>(t - from)] = full;
    }
    end[static_cast<std::size_t>(c.rank())] = w.save();
  });
  return end;
}

template <class O>
std::vector<hs::shard> fresh_shards(const O& opt, const hb::cephalo_plan& plan,
                                    const std::vector<float>& init) {
  const auto l = hs::cephalo_layout(plan, hs::mlp_buckets(cephalo_model()));
  std::vector<hs::shard> s;
  for (int r = 0; r < l.ranks(); ++r) s.push_back(hs::sharded_state<O>(opt, l, r, init).save());
  return s;
}

auto cephalo_optimizers() {
  return std::make_tuple(ho::sgd({.lr = 0.1, .weight_decay = 0.01}),
                         ho::momentum({.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01}),
                         ho::adam({.lr = 0.01, .weight_decay = 0.01}));
}

/// The float-reassociation bound between two computations of the mean gradient over the B
/// samples at `p` that differ only in summation order and in how 1/B is applied (1/B once, or
/// 1/m_d then m_d/B), per layer: each element of layer l is off by at most gamma_K · max_{i in
/// l} Σ_j |g_{j,i}| / B per computation, K = B (the sum over samples) + L·W (the dot products
/// of L layers of width <= W, whose order BLAS may change with the number of rows) + 4 (the
/// scalings), gamma_K = K u / (1 - K u), u = 2^-24; the two differ by at most twice that.
/// Normwise per layer, not per element: a rounding of 1/m_d in the logits' gradient travels
/// back through the layers, and an element whose per-sample terms cancel there gets an error
/// relative to its layer's scale, not its own.
std::vector<double> reassociation_bound(hn::mlp<float>& model, const std::vector<float>& p,
                                        const samples& s) {
  const std::size_t n = p.size();
  std::vector<double> abs_sum(n, 0.0);
  std::vector<float> g(n);
  for (std::size_t j = 0; j < kGlobal; ++j) {
    model.loss_and_gradient(hg::span<const float>(p.data(), n), s.range(j, j + 1),
                            hg::span<float>(g.data(), n));
    for (std::size_t i = 0; i < n; ++i) abs_sum[i] += std::abs(static_cast<double>(g[i]));
  }
  std::size_t widest = 0;
  for (auto w : model.sizes()) widest = std::max(widest, w);
  const double u = std::ldexp(1.0, -24);
  const double k = static_cast<double>(kGlobal + model.num_layers() * widest + 4);
  const double gamma = k * u / (1.0 - k * u);
  std::vector<double> bound(n);
  for (std::size_t l = 0; l < model.num_layers(); ++l) {
    const auto first = abs_sum.begin() + static_cast<std::ptrdiff_t>(model.layer_offset(l));
    const auto last = first + static_cast<std::ptrdiff_t>(model.layer_params(l));
    const double b = 2.0 * gamma * *std::max_element(first, last) / static_cast<double>(kGlobal);
    std::fill(bound.begin() + (first - abs_sum.begin()), bound.begin() + (last - abs_sum.begin()),
              b);
  }
  return bound;
}

/// The unsharded model's full-batch step: the mean gradient over the B samples in one call.
std::vector<float> full_batch_gradient(hn::mlp<float>& model, const std::vector<float>& p,
                                       const samples& s) {
  std::vector<float> g(p.size());
  model.loss_and_gradient(hg::span<const float>(p.data(), p.size()), s.all(),
                          hg::span<float>(g.data(), g.size()));
  return g;
}

template <class F>
void refused_by(F&& f, const std::string& what) {
  const auto e = error_of<std::invalid_argument>(f);
  BOOST_TEST(e.find(what) != std::string::npos, "expected '" << what << "' in: " << e);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cephalo_run)

BOOST_AUTO_TEST_CASE(a_cephalo_step_is_the_global_batch_step_in_its_derived_order_bitwise) {
  // The sharded run against the sequential computation of the same sums in the same order
  // (reference_step): bitwise, every step, for uneven, even and 4-rank plans and 3 optimizers.
  std::apply(
      [&](const auto&... opts) {
        const auto one = [&](const auto& opt) {
          using O = std::remove_cvref_t<decltype(opt)>;
          for (const auto* plan : {&kPlanned3, &kEven3, &kPlanned4}) {
            auto model = cephalo_model();
            auto p = cephalo_init(model);
            auto st = opt.init(thrust::cpp::par, hg::span<const float>(p.data(), p.size()));
            std::vector<std::vector<float>> trace;
            const auto end = cephalo_steps(opt, *plan, fresh_shards(opt, *plan, p), 0, 4, trace);
            for (int t = 0; t < 4; ++t) {
              reference_step(model, opt, st, p, *plan, step_samples(t, model));
              BOOST_TEST(same_bits(trace[static_cast<std::size_t>(t)], p),
                         O::name() << " with " << plan->devices.size() << " ranks: step " << t);
            }
            const auto& l = end[0].shard_layout;
            for (int r = 0; r < l.ranks(); ++r)
              BOOST_TEST(same_state(l, r, end[static_cast<std::size_t>(r)].state, st),
                         O::name() << " state of rank " << r);
          }
        };
        (one(opts), ...);
      },
      cephalo_optimizers());
}

BOOST_AUTO_TEST_CASE(
    the_cephalo_gradient_is_the_full_batch_gradient_within_the_reassociation_bound) {
  // Every step, every rank: its reduced gradient shard against the unsharded model's gradient
  // over all B samples at the same parameters (reassociation_bound). A mis-weighted sum (the
  // ranks' means averaged, ignoring m_d a_d) is off by O(|g|), far outside the bound.
  for (const auto* plan : {&kPlanned3, &kPlanned4}) {
    const auto model0 = cephalo_model();
    const auto init = cephalo_init(model0);
    failures f;
    std::mutex m;
    double worst = 0.0;
    hi::spawn(static_cast<int>(plan->devices.size()), [&](hi::communicator c) {
      auto model = model0;
      hs::cephalo_worker<ho::sgd> w(model0, ho::sgd({.lr = 0.1}), *plan, kGlobal, c.rank(), init);
      std::vector<float> p(model.num_params());
      for (int t = 0; t < 4; ++t) {
        const auto s = step_samples(t, model);
        w.gather(c, hg::span<float>(p.data(), p.size()));
        const auto g = full_batch_gradient(model, p, s);
        const auto bound = reassociation_bound(model, p, s);
        const auto [b, e] = w.samples();
        w.step(thrust::cpp::par, c, s.range(b, e));
        const auto mine = w.state().gradients();
        for (const auto& seg : w.state().shard_layout().segments(c.rank())) {
          for (std::size_t k = 0; k < seg.count; ++k) {
            const std::size_t i = seg.global + k;
            const double d =
                std::abs(static_cast<double>(mine[seg.local + k]) - static_cast<double>(g[i]));
            if (d > bound[i])
              f.add("step " + std::to_string(t) + " element " + std::to_string(i) + ": |diff| " +
                    std::to_string(d) + " > bound " + std::to_string(bound[i]));
            std::lock_guard<std::mutex> l(m);
            if (bound[i] > 0) worst = std::max(worst, d / bound[i]);
          }
        }
      }
    });
    BOOST_TEST(f.list.empty(),
               f.list.size() << " outside; first: " << (f.list.empty() ? "" : f.list.front()));
    BOOST_TEST_MESSAGE("cephalo gradient vs full batch, "
                       << plan->devices.size() << " ranks: worst |diff| / bound = " << worst);
  }
}

BOOST_AUTO_TEST_CASE(
    planned_even_and_unsharded_full_batch_runs_follow_one_trajectory_within_the_bound) {
  // 5 SGD steps (lr 0.1). The full-batch run's parameter error bound: delta_{t+1} = 2 delta_t +
  // lr · eps_t, eps_t = max_i reassociation_bound at its parameters (the factor 2 is 1 + lr·L
  // with lr·L <= 1 for a stable step size); a planned or even run is within delta_t of it.
  const ho::sgd opt({.lr = 0.1, .weight_decay = 0.01});
  auto model = cephalo_model();
  auto p = cephalo_init(model);
  const auto init = p;
  auto st = opt.init(thrust::cpp::par, hg::span<const float>(p.data(), p.size()));
  std::vector<std::vector<float>> full;
  std::vector<double> delta;
  double d = 0.0;
  for (int t = 0; t < 5; ++t) {
    const auto s = step_samples(t, model);
    const auto bound = reassociation_bound(model, p, s);
    const auto g = full_batch_gradient(model, p, s);
    opt.update(thrust::cpp::par, hg::span<const float>(g.data(), g.size()), st,
               hg::span<float>(p.data(), p.size()));
    d = 2.0 * d + 0.1 * *std::max_element(bound.begin(), bound.end());
    full.push_back(p);
    delta.push_back(d);
  }
  double moved = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i)
    moved = std::max(moved, std::abs(static_cast<double>(p[i] - init[i])));
  BOOST_TEST(moved > 1000 * delta.back());  // the runs move far beyond the bound
  for (const auto* plan : {&kPlanned3, &kEven3, &kPlanned4}) {
    std::vector<std::vector<float>> trace;
    cephalo_steps(opt, *plan, fresh_shards(opt, *plan, init), 0, 5, trace);
    double worst = 0.0;
    for (std::size_t t = 0; t < 5; ++t) {
      double err = 0.0;
      for (std::size_t i = 0; i < p.size(); ++i)
        err = std::max(
            err, std::abs(static_cast<double>(trace[t][i]) - static_cast<double>(full[t][i])));
      BOOST_TEST(err <= delta[t], plan->devices.size()
                                      << " ranks, step " << t << ": " << err << " > " << delta[t]);
      worst = std::max(worst, err / delta[t]);
    }
    BOOST_TEST_MESSAGE("trajectory vs full batch, " << plan->devices.size()
                                                    << " ranks: worst err / bound = " << worst);
  }
}

BOOST_AUTO_TEST_CASE(resume_onto_another_plan_continues_the_same_trajectory_bitwise) {
  // 2 adam steps with the 3-rank plan, sealed checkpoints, resharded onto the 4-rank plan's
  // layout, 2 more steps: bitwise the sequential run of 2 steps in the first plan's order and
  // 2 in the second's (a_cephalo_step_is_...: each plan's step is its derived order).
  const ho::adam opt({.lr = 0.01, .weight_decay = 0.01});
  auto model = cephalo_model();
  auto p = cephalo_init(model);
  std::vector<std::vector<float>> trace;
  const auto mid = cephalo_steps(opt, kPlanned3, fresh_shards(opt, kPlanned3, p), 0, 2, trace);
  std::vector<hs::shard> saved;
  for (const auto& s : mid) saved.push_back(through_checkpoint(s));
  const auto to = hs::cephalo_layout(kPlanned4, hs::mlp_buckets(model));
  std::vector<hs::shard> resumed;
  for (int r = 0; r < to.ranks(); ++r) resumed.push_back(hs::reshard(saved, to, r));
  const auto end = cephalo_steps(opt, kPlanned4, resumed, 2, 4, trace);
  auto st = opt.init(thrust::cpp::par, hg::span<const float>(p.data(), p.size()));
  for (int t = 0; t < 4; ++t)
    reference_step(model, opt, st, p, t < 2 ? kPlanned3 : kPlanned4, step_samples(t, model));
  BOOST_TEST(same_bits(trace.back(), p));
  BOOST_TEST(end[0].steps == 4);
  for (int r = 0; r < to.ranks(); ++r)
    BOOST_TEST(same_state(to, r, end[static_cast<std::size_t>(r)].state, st));
  // A shard of another layout is refused by name.
  refused_by([&] { hs::cephalo_worker<ho::adam>(model, opt, kPlanned4, kGlobal, saved[0]); },
             "cephalo_worker.resumed.shard_layout");
}

BOOST_AUTO_TEST_CASE(a_plan_over_a_rank_s_memory_budget_is_refused_naming_rank_worker_and_bytes) {
  // Rank 1 of the 3-rank plan with adam, by the header's items computed here: its shard
  // (params, reduced gradients, 2 adam slots: 4 floats per element), the reduce-scatter
  // scratch (2 peers x its largest piece), the gathered model, accumulator and micro-batch
  // gradient (3 S; no separate bucket buffers), and m_1 = 1 sample's activations (layer outputs
  // 7 + 6 + 3, logits' gradient 3, two rows of the widest layer 7). By hand: layers of 42, 48
  // and 21 elements, rank 1's pieces (cuts at floor(0.2 S), floor(0.7 S)) 21, 24 and 10, so 55
  // elements and a largest piece of 24; S = 111: 4 (4·55 + 2·24 + 3·111 + 33) = 2536 bytes.
  const auto model = cephalo_model();
  const auto init = cephalo_init(model);
  const auto l = hs::cephalo_layout(kPlanned3, hs::mlp_buckets(model));
  std::size_t largest_piece = 0;
  for (std::size_t b = 0; b < l.buckets(); ++b)
    largest_piece = std::max(largest_piece, l.piece_count(b, 1));
  const std::size_t need = 4 * (4 * l.shard_size(1) + 2 * largest_piece + 3 * model.num_params() +
                                1 * (7 + 6 + 3 + 3 + 2 * 7));
  BOOST_TEST(need == 2536u);
  const auto budgets = [&](std::size_t b1) {
    return std::vector<hs::memory_budget>{
        {"fast-big", 1 << 20}, {"slow-small", b1}, {"mid", 1 << 20}};
  };
  const ho::adam opt;
  for (int r = 0; r < 3; ++r)  // every rank refuses before any collective
    refused_by(
        [&] {
          hs::cephalo_worker<ho::adam>(model, opt, kPlanned3, kGlobal, r, init,
                                       {.budgets = budgets(need - 1)});
        },
        "memory_budgets[1] (worker 'slow-small', bytes)' = " + std::to_string(need - 1) +
            ": rank 1 (worker 'slow-small') needs " + std::to_string(need) + " bytes");
  hs::cephalo_worker<ho::adam> ok(model, opt, kPlanned3, kGlobal, 0, init,
                                  {.budgets = budgets(need)});
  BOOST_TEST(hs::cephalo_memory_of<ho::adam>(l, 1, 1, hs::mlp_activation_bytes_per_sample(model))
                 .total() == need);
  // The even plan gives rank 1 a third of the state and m = 4: a budget the planned one fits
  // refuses it (the planner's trade: a small device takes a small micro-batch).
  const auto le = hs::cephalo_layout(kEven3, hs::mlp_buckets(model));
  const std::size_t even_need =
      hs::cephalo_memory_of<ho::adam>(le, 1, 4, hs::mlp_activation_bytes_per_sample(model)).total();
  BOOST_TEST(even_need > need);
  refused_by(
      [&] {
        hs::cephalo_worker<ho::adam>(model, opt, kEven3, kGlobal, 0, init,
                                     {.budgets = budgets(need)});
      },
      "needs " + std::to_string(even_need) + " bytes");
}

BOOST_AUTO_TEST_CASE(bad_plans_and_steps_are_refused_naming_device_field_value_and_rule) {
  const auto model = cephalo_model();
  const auto init = cephalo_init(model);
  const ho::sgd opt;
  const auto refuses = [&](const hb::cephalo_plan& plan, const std::string& what) {
    refused_by([&] { hs::cephalo_worker<ho::sgd>(model, opt, plan, kGlobal, 0, init); }, what);
  };
  refuses(make_plan({{2, 3, 0.2}, {1, 2, 0.4}, {4, 1, 0.3}}),
          "cephalo_plan (sum of shard_fraction)' = 0.9");
  refuses(make_plan({{2, 3, 0.2}, {1, 1, 0.5}, {4, 1, 0.3}}),
          "cephalo_plan (sum of micro_batch * accumulation)' = 11");
  refuses(make_plan({{2, 3, 0.2}, {0, 2, 0.5}, {4, 1, 0.3}}),
          "cephalo_plan.devices[1].micro_batch' = 0");
  refuses(make_plan({{2, 3, 0.2}, {1, 2, 0.5}, {4, 0, 0.3}}),
          "cephalo_plan.devices[2].accumulation' = 0");
  refuses(make_plan({{2, 3, -0.2}, {1, 2, 0.9}, {4, 1, 0.3}}),
          "cephalo_plan.devices[0].shard_fraction' = -0.2");
  refused_by([&] { hs::cephalo_worker<ho::sgd>(model, opt, kPlanned3, kGlobal, 3, init); },
             "cephalo_worker.rank");
  refused_by(
      [&] {
        hs::cephalo_worker<ho::sgd>(model, opt, kPlanned3, kGlobal, 0, init,
                                    {.step = {.op = hc::reduce_op::avg}});
      },
      "cephalo_options.step.op");
  hi::spawn(1, [&](hi::communicator c) {
    hs::cephalo_worker<ho::sgd> w(model, opt, make_plan({{4, 3, 1.0}}), kGlobal, 0, init);
    const auto s = step_samples(0, model);
    refused_by([&] { w.step(thrust::cpp::par, c, s.range(0, 11)); },
               "cephalo_worker.step.mine (samples)");
  });
}

BOOST_AUTO_TEST_CASE(the_planner_s_plan_under_the_runner_s_memory_model_passes_the_budget_check) {
  // Profile -> plan -> train: three workers (fast and large, middle, slow and small), the
  // planner given this runner's memory model (cephalo_memory_model, cephalo_reserved_bytes),
  // its plan trained with every worker's capacity as its enforced budget; every rank's
  // accounted bytes are within its capacity and at most the planner's estimate.
  const auto model = cephalo_model();
  const auto mem = hs::cephalo_memory_model<ho::adam>(model, 3);
  const double reserved = hs::cephalo_reserved_bytes<ho::adam>(model, 3);
  const double full = reserved + mem.state_bytes + mem.activation_bytes_per_sample * 4;
  const std::vector<hb::device_profile> devices = {{1e-3, 1e-4, 2 * full, reserved},
                                                   {2e-3, 1e-4, 0.8 * full, reserved},
                                                   {4e-3, 1e-4, 0.6 * full, reserved}};
  const auto plan = hb::plan_cephalo(devices, mem, {.global_batch = kGlobal, .max_micro_batch = 4});
  BOOST_TEST_REQUIRE(plan.has_value());
  std::vector<hs::memory_budget> budgets;
  for (std::size_t d = 0; d < 3; ++d)
    budgets.push_back({"w" + std::to_string(d), static_cast<std::size_t>(devices[d].memory_bytes)});
  const auto init = cephalo_init(model);
  for (int r = 0; r < 3; ++r) {
    const hs::cephalo_worker<ho::adam> w(model, ho::adam{}, *plan, kGlobal, r, init,
                                         {.budgets = budgets});
    const double used = static_cast<double>(w.memory().total());
    BOOST_TEST(used <= plan->devices[static_cast<std::size_t>(r)].memory_bytes);
    BOOST_TEST(used <= devices[static_cast<std::size_t>(r)].memory_bytes);
  }
  // No worker holds the whole state: the even split of it is refused on the smallest.
  const auto even = make_plan({{4, 1, 1.0 / 3}, {4, 1, 1.0 / 3}, {4, 1, 1.0 / 3}});
  BOOST_TEST(plan->devices[2].shard_fraction < 1.0 / 3);
  refused_by(
      [&] {
        hs::cephalo_worker<ho::adam>(model, ho::adam{}, even, kGlobal, 0, init,
                                     {.budgets = budgets});
      },
      "rank 2 (worker 'w2')");
}

BOOST_AUTO_TEST_CASE(
    profile_plan_train_measured_speeds_fit_the_injected_ones_and_the_plan_beats_the_even_split) {
  // Three workers whose micro-batch of m samples takes o_d + m s_d on a manual clock (advanced
  // by the injected compute hook): two profiling steps (m = 2, a = 2; m = 4, a = 1) give each
  // rank two measurements, fit_device_profile recovers (s_d, o_d), plan_cephalo plans over the
  // fitted profiles, and a step with that plan takes the predicted time, less than the even
  // split's max_d (o_d + 4 s_d) = 13 ms.
  const std::vector<double> s_true = {0.5e-3, 1e-3, 3e-3}, o_true = {2e-3, 1e-3, 1e-3};
  const auto model = cephalo_model();
  const auto init = cephalo_init(model);
  const auto profile = make_plan({{2, 2, 0.4}, {2, 2, 0.3}, {2, 2, 0.3}});
  std::vector<hb::device_profile> fitted(3);
  std::vector<double> stepped(3);
  std::optional<hb::cephalo_plan> plan;
  std::mutex m;
  hi::spawn(3, [&](hi::communicator c) {
    const auto r = static_cast<std::size_t>(c.rank());
    hg::manual_clock clk;
    hs::cephalo_options o;
    o.now = [clk] { return clk.now(); };
    o.after_micro_batch = [clk, &s_true, &o_true](int q, std::size_t mb) mutable {
      const auto d = static_cast<std::size_t>(q);
      clk.advance(hg::seconds{o_true[d] + static_cast<double>(mb) * s_true[d]});
    };
    const auto s = step_samples(0, model);
    std::vector<hb::worker_measurement> seen;
    for (const auto& pl : {profile, kEven3}) {
      hs::cephalo_worker<ho::sgd> w(model, ho::sgd{}, pl, kGlobal, c.rank(), init, o);
      const auto [b, e] = w.samples();
      w.step(thrust::cpp::par, c, s.range(b, e));
      seen.push_back(w.last_measurement());
    }
    BOOST_TEST(seen[0].samples == 4u);
    BOOST_TEST(seen[0].iterations == 2u);
    {
      std::lock_guard<std::mutex> l(m);
      fitted[r] = hb::fit_device_profile(seen, 1e9);
    }
    c.barrier().wait();
    if (c.rank() == 0) plan = hb::plan_cephalo(fitted, {0, 0}, {.global_batch = kGlobal});
    c.barrier().wait();
    hs::cephalo_worker<ho::sgd> w(model, ho::sgd{}, *plan, kGlobal, c.rank(), init, o);
    const auto [b, e] = w.samples();
    w.step(thrust::cpp::par, c, s.range(b, e));
    stepped[r] = w.last_measurement().compute_time.count();
  });
  for (std::size_t d = 0; d < 3; ++d) {
    BOOST_TEST(std::abs(fitted[d].seconds_per_sample - s_true[d]) <= 1e-12);
    BOOST_TEST(std::abs(fitted[d].seconds_per_micro_batch - o_true[d]) <= 1e-12);
    BOOST_TEST(std::abs(stepped[d] - plan->devices[d].compute_seconds) <= 1e-12);
  }
  BOOST_TEST(plan->step_seconds < 13e-3 - 1e-6);
  BOOST_TEST(*std::max_element(stepped.begin(), stepped.end()) < 13e-3 - 1e-6);
  // Clamped fits: a time falling with m gives s = 0 and o the mean time; a line through
  // (1, 0.5 ms), (2, 2 ms) would have o = -1 ms: o = 0 and s = Σ m t / Σ m² = 0.9 ms.
  const std::vector<hb::worker_measurement> falling = {{1, 1, hg::seconds{3e-3}, 0},
                                                       {4, 1, hg::seconds{1e-3}, 0}};
  const auto pf = hb::fit_device_profile(falling, 1e9);
  BOOST_TEST(pf.seconds_per_sample == 0.0);
  BOOST_TEST(std::abs(pf.seconds_per_micro_batch - 2e-3) <= 1e-15);
  const std::vector<hb::worker_measurement> steep = {{1, 1, hg::seconds{0.5e-3}, 0},
                                                     {4, 2, hg::seconds{4e-3}, 0}};
  const auto ps = hb::fit_device_profile(steep, 1e9);
  BOOST_TEST(ps.seconds_per_micro_batch == 0.0);
  BOOST_TEST(std::abs(ps.seconds_per_sample - 0.9e-3) <= 1e-15);
  // Measurements at one micro-batch size cannot separate o from s.
  const std::vector<hb::worker_measurement> one = {{4, 2, hg::seconds{0.01}, 0},
                                                   {2, 1, hg::seconds{0.005}, 0}};
  refused_by([&] { (void)hb::fit_device_profile(one, 1e9); },
             "fit_device_profile.measured (micro-batch sizes)");
}

BOOST_AUTO_TEST_SUITE_END()
