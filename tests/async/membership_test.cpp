// Membership on the real clock (issue 46; docs/elastic.md, "Membership on the real clock"):
// the server of runtime/server.hpp over inproc threads, with workers that leave (a drain, or
// silence past their learned deadline) and join (the same slot restarted on a new thread, or
// a spare slot that starts late). Real time gives no trace to compare, so the tests assert
// invariants: conservation (every result handed over is applied, buffered or discarded once;
// the version counts the applied ones; results of gone workers are refused, never applied),
// Ringmaster's delay bound, SSP's bound over the members, the run reaching its horizon, a
// joiner's model hash-equal to the server's, the deadline rule (a 10x straggler stays, a silent
// worker goes within its deadline), and hostile membership messages refused and counted.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "support.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/core/hash.hpp"
#include "heterograd/runtime/membership.hpp"
#include "heterograd/runtime/server.hpp"

using namespace async_test;

namespace {

using comm_t = hg::comm::inproc::communicator;
using client_t = hr::worker_client<double, comm_t>;
constexpr std::size_t d = 6;
constexpr std::uint64_t never = std::numeric_limits<std::uint64_t>::max();

// Worker w's gradient of |x - c_w|^2 / 2, c_w[j] = (w + 1) (j + 1) / 10.
double centre(std::size_t w, std::size_t j) { return 0.1 * static_cast<double>((w + 1) * (j + 1)); }

// Threads on one inproc world, each on a rank (or on a rank restarted: world::rejoin); a
// thread that throws aborts the world and its message is kept.
class thread_group {
 public:
  explicit thread_group(int n) : w_(n) {}
  template <class F>
  void start(int rank, bool restart, F f) {
    comm_t c = restart ? w_.rejoin(rank) : w_.rank(rank);
    threads_.emplace_back([this, c, f]() mutable {
      try {
        f(c);
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> l(m_);
          if (error_.empty()) error_ = e.what();
        }
        w_.abort(c.rank(), e.what());
      }
    });
  }
  std::string finish() {
    for (auto& t : threads_) t.join();
    w_.detail_end();
    return error_;
  }

 private:
  hg::comm::inproc::world w_;
  std::vector<std::thread> threads_;
  std::mutex m_;
  std::string error_;
};

struct plan {
  double job_s = 0.002;            // each job's wall time (a sleep)
  std::uint64_t leave_after = never;  // leave deliberately after this many jobs
  bool joining = false;
  std::uint64_t silent_at = never;  // this job lasts silent_s instead
  double silent_s = 0;
};
struct outcome {
  std::uint64_t jobs = 0;
  std::optional<std::uint64_t> hash;
  std::uint64_t version = 0;
};

outcome worker_loop(comm_t c, const hr::remote_options& o, const plan& p) {
  std::optional<client_t> cl;
  if (p.joining) cl.emplace(c, d, o, hr::joining);
  else cl.emplace(c, d, o);
  outcome r{0, cl->joined_hash(), cl->joined_version()};
  std::vector<double> x(d), g(d);
  while (cl->pull(hg::span<double>(x))) {
    for (std::size_t j = 0; j < d; ++j) g[j] = x[j] - centre(cl->worker(), j);
    const double s = r.jobs == p.silent_at ? p.silent_s : p.job_s;
    std::this_thread::sleep_for(std::chrono::duration<double>(s));
    cl->push(hg::span<const double>(g));
    if (++r.jobs >= p.leave_after) {
      cl->leave();
      break;
    }
  }
  return r;
}

hr::remote_options elastic_options(std::uint64_t updates) {
  hr::remote_options o{.timeout = hg::seconds{30}, .max_updates = updates, .shutdown_grace = hg::seconds{30}};
  o.membership.elastic = true;
  o.membership.absent = {3};
  o.membership.deadline.floor = 5.0;  // these runs test leaves and joins, not deadlines
  return o;
}

const hr::membership_event* find_event(const hr::remote_summary& s, hr::membership_event::kind k, std::uint32_t w) {
  for (const auto& e : s.membership)
    if (e.what == k && e.worker == w) return &e;
  return nullptr;
}

// Four slots: workers 0, 1, 2 from the start, slot 3 a spare. Worker 1 drains after 20 jobs;
// then slot 1 restarts on a new thread and slot 3 starts late, both joining. Checks what every
// policy must keep; returns the summary for the policy's own checks.
template <class Policy>
hr::remote_summary leave_and_join(Policy& p, std::uint64_t updates, const char* name) {
  const hr::remote_options o = elastic_options(updates);
  thread_group g(5);
  hr::remote_summary s;
  std::atomic<bool> left{false};
  outcome restarted, spare;
  g.start(0, false, [&](comm_t c) { s = hr::serve<double>(p, c, o); });
  g.start(1, false, [&](comm_t c) { worker_loop(c, o, {}); });
  g.start(3, false, [&](comm_t c) { worker_loop(c, o, {.job_s = 0.003}); });
  g.start(2, false, [&](comm_t c) {
    worker_loop(c, o, {.leave_after = 20});
    left = true;
  });
  for (int i = 0; i < 20000 && !left; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  BOOST_TEST_REQUIRE(left.load(), name);
  g.start(2, true, [&](comm_t c) { restarted = worker_loop(c, o, {.joining = true}); });
  g.start(4, false, [&](comm_t c) { spare = worker_loop(c, o, {.job_s = 0.003, .joining = true}); });
  const std::string error = g.finish();
  BOOST_TEST_REQUIRE(error.empty(), name << ": " << error);

  BOOST_TEST_CONTEXT(name) {
    // The run reaches its horizon; every member (the joiners too) is live at the end.
    BOOST_TEST(p.version() == updates);
    BOOST_TEST(p.live_workers() == 4u);
    // Conservation: each result handed over has one outcome; the version counts the applied
    // ones (none applied twice); nothing of a gone worker was handed over.
    const auto& log = s.log;
    const auto applied = log.count(sim::update_outcome::applied);
    BOOST_TEST(applied + log.count(sim::update_outcome::buffered) + log.count(sim::update_outcome::discarded) ==
               s.arrivals);
    BOOST_TEST(applied == p.version());
    BOOST_TEST(p.dropped_after_leave() == 0u);  // the server refused them before the policy
    BOOST_TEST(s.refused_late == 0u);           // a drain leaves no late result
    BOOST_TEST(s.lost <= 1u);                   // at most the job sent after its last push
    BOOST_TEST(s.refused == 0u);
    std::uint64_t finished = 0;
    for (auto k : s.jobs_finished) finished += k;
    BOOST_TEST(finished == s.arrivals);
    // The changes, in order: worker 1 leaves, then slots 1 and 3 join; each joiner was
    // welcomed with the server's model, hash-equal before it computed.
    const auto* gone = find_event(s, hr::membership_event::kind::leave, 1);
    const auto* back = find_event(s, hr::membership_event::kind::join, 1);
    const auto* late = find_event(s, hr::membership_event::kind::join, 3);
    BOOST_TEST_REQUIRE((gone && back && late));
    BOOST_TEST(s.membership.size() == 3u);
    BOOST_TEST(gone < back);
    BOOST_TEST_REQUIRE(restarted.hash.has_value());
    BOOST_TEST_REQUIRE(spare.hash.has_value());
    BOOST_TEST(*restarted.hash == back->params_hash);
    BOOST_TEST(restarted.version == back->version);
    BOOST_TEST(*spare.hash == late->params_hash);
    BOOST_TEST(s.jobs_finished[1] >= 20u);
    BOOST_TEST(s.jobs_finished[3] + restarted.jobs > 0u);  // the joiners took part
  }
  return s;
}

auto server(double lr) { return async::model_server<double>(std::vector<double>(d, 0.0), async::plain_sgd(lr)); }

}  // namespace

BOOST_AUTO_TEST_SUITE(real_clock_membership)

BOOST_AUTO_TEST_CASE(asgd_ringmaster_rennala_ssp_ia2sgd_and_malenia_keep_their_invariants_when_a_worker_leaves_and_two_join,
                     *boost::unit_test::timeout(120)) {
  {
    async::asgd p(4, server(0.05));
    const auto s = leave_and_join(p, 400, "asgd");
    BOOST_TEST(s.lost == 1u);  // the job sent after worker 1's last push
  }
  {
    async::ringmaster_asgd p(4, server(0.05), {.threshold = 3});
    const auto s = leave_and_join(p, 400, "ringmaster");
    BOOST_TEST(s.log.staleness_histogram(sim::update_outcome::applied).size() <= 3u);  // delays < R = 3
  }
  {
    async::rennala_sgd p(4, server(0.05), {.batch = 3});
    const auto s = leave_and_join(p, 150, "rennala");
    // Each update sums B = 3 fresh gradients: B - 1 buffered, the B-th applied.
    BOOST_TEST(s.log.count(sim::update_outcome::buffered) + s.log.count(sim::update_outcome::applied) ==
               3 * p.version() + p.collected());
  }
  {
    async::ssp_server p(4, server(0.05), {.staleness = 1});
    leave_and_join(p, 400, "ssp");
    BOOST_TEST(p.max_gap_started() <= 1u);  // over the members, across the changes
  }
  {
    async::ia2sgd p(4, server(0.05));
    leave_and_join(p, 400, "ia2sgd");
    // The table of the four members at the end; x near their centres' mean.
    double worst = 0;
    for (std::size_t j = 0; j < d; ++j)
      worst = std::max(worst, std::fabs(p.params()[j] - (centre(0, j) + centre(1, j) + centre(2, j) + centre(3, j)) / 4));
    BOOST_TEST(worst < 0.05);
  }
  {
    async::malenia_sgd p(4, server(0.2), {.threshold = 1.0});
    leave_and_join(p, 60, "malenia");
    // Each step averages the members' running means at the round's point: x goes to the mean
    // of the four members' centres.
    double worst = 0;
    for (std::size_t j = 0; j < d; ++j)
      worst = std::max(worst, std::fabs(p.params()[j] - (centre(0, j) + centre(1, j) + centre(2, j) + centre(3, j)) / 4));
    BOOST_TEST(worst < 0.05);
  }
}

// The deadline is each worker's own: a straggler whose jobs take 10x the others' is never
// declared gone, while a fast worker that goes silent is, within its learned deadline (far
// below the 30 s timeout); its late result is refused, never applied.
BOOST_AUTO_TEST_CASE(a_ten_times_straggler_stays_and_a_silent_worker_is_declared_gone_within_its_deadline,
                     *boost::unit_test::timeout(120)) {
  async::asgd p(3, server(0.05));
  hr::remote_options o{.timeout = hg::seconds{30}, .max_updates = 150, .shutdown_grace = hg::seconds{30}};
  o.membership.elastic = true;
  o.membership.deadline = {.floor = 0.05, .factor = 5.0, .quantile = 0.9, .window = 64, .min_jobs = 3};
  thread_group g(4);
  hr::remote_summary s;
  outcome straggler;
  g.start(0, false, [&](comm_t c) { s = hr::serve<double>(p, c, o); });
  g.start(1, false, [&](comm_t c) { worker_loop(c, o, {.job_s = 0.02}); });
  g.start(2, false, [&](comm_t c) { straggler = worker_loop(c, o, {.job_s = 0.2}); });
  g.start(3, false, [&](comm_t c) { worker_loop(c, o, {.job_s = 0.02, .silent_at = 8, .silent_s = 1.5}); });
  const std::string error = g.finish();
  BOOST_TEST_REQUIRE(error.empty(), error);
  BOOST_TEST(p.version() == 150u);
  BOOST_TEST(!find_event(s, hr::membership_event::kind::gone, 1));  // the straggler stays
  BOOST_TEST(straggler.jobs >= 4u);
  BOOST_TEST(s.jobs_finished[1] >= 3u);
  const auto* gone = find_event(s, hr::membership_event::kind::gone, 2);
  BOOST_TEST_REQUIRE(gone);
  BOOST_TEST_MESSAGE("silent worker declared gone after " << gone->silent << " s, deadline " << gone->deadline << " s");
  BOOST_TEST(gone->deadline >= 0.05);
  BOOST_TEST(gone->deadline < 0.5);  // learned from its 20 ms jobs: 5 x q90, far below the timeout
  BOOST_TEST(gone->silent >= gone->deadline);
  BOOST_TEST(gone->silent <= gone->deadline + 0.5);  // detection slack on a loaded machine
  BOOST_TEST(s.membership.size() == 1u);
  BOOST_TEST(s.jobs_finished[2] == 8u);  // its ninth job (the silent one) was never handed over
  BOOST_TEST(s.lost == 1u);
  BOOST_TEST(s.refused_late == 1u);  // that job's result, pushed after 1.5 s
  BOOST_TEST(s.log.count(sim::update_outcome::applied) == p.version());
}

// A gone worker's late result that is malformed too (a payload of the wrong size) is refused
// as late, never as a protocol violation: the slot is not evicted, and a new worker joins it
// and computes. (Before, the wrong size evicted the slot for good and the joiner was refused.)
BOOST_AUTO_TEST_CASE(a_gone_workers_late_result_of_the_wrong_size_is_refused_late_and_its_slot_can_be_joined,
                     *boost::unit_test::timeout(120)) {
  async::asgd p(3, server(0.05));
  hr::remote_options o{.timeout = hg::seconds{30}, .max_updates = 400, .shutdown_grace = hg::seconds{30}};
  o.membership.elastic = true;
  o.membership.deadline = {.floor = 0.05, .factor = 5.0, .quantile = 0.9, .window = 64, .min_jobs = 3};
  thread_group g(4);
  hr::remote_summary s;
  std::atomic<bool> sent{false};
  outcome joined;
  g.start(0, false, [&](comm_t c) { s = hr::serve<double>(p, c, o); });
  g.start(1, false, [&](comm_t c) { worker_loop(c, o, {.job_s = 0.02}); });
  g.start(2, false, [&](comm_t c) { worker_loop(c, o, {.job_s = 0.02}); });
  g.start(3, false, [&](comm_t c) {
    client_t cl(c, d, o);
    std::vector<double> x(d), grad(d + 1, 0.5);  // one value too many
    for (int k = 0; k < 8 && cl.pull(hg::span<double>(x)); ++k) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      cl.push(hg::span<const double>(grad.data(), d));
    }
    BOOST_TEST_REQUIRE(cl.pull(hg::span<double>(x)));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // declared gone meanwhile
    const hr::detail::tags tags(o.tag_base);
    const std::array<std::uint64_t, 4> h{hr::detail::result_kind, cl.version(), cl.job_index(), 0};
    c.send(hg::span<const std::uint64_t>(h.data(), h.size()), 0, tags.result_header).wait();
    c.send(hg::span<const double>(grad.data(), grad.size()), 0, tags.result_payload).wait();
    sent = true;
  });
  for (int i = 0; i < 20000 && !sent; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  BOOST_TEST_REQUIRE(sent.load());
  g.start(3, true, [&](comm_t c) { joined = worker_loop(c, o, {.job_s = 0.02, .joining = true}); });
  const std::string error = g.finish();
  BOOST_TEST_REQUIRE(error.empty(), error);
  BOOST_TEST(p.version() == 400u);
  BOOST_TEST_REQUIRE(find_event(s, hr::membership_event::kind::gone, 2));
  BOOST_TEST(find_event(s, hr::membership_event::kind::join, 2));
  BOOST_TEST(s.refused_late == 1u);
  BOOST_TEST(s.refused == 0u);
  BOOST_TEST(s.evicted[2].empty(), s.evicted[2]);
  BOOST_TEST(joined.jobs >= 1u);
  BOOST_TEST(s.log.count(sim::update_outcome::applied) == p.version());
}

// The deadline rule by hand: the quantile of a worker's own times (nearest rank), the floor,
// the outer bound, and the outer bound before min_jobs.
BOOST_AUTO_TEST_CASE(the_deadline_is_the_floor_or_factor_times_the_workers_own_quantile_bounded_by_the_timeout) {
  hr::deadline_tracker t(2, {.floor = 0.5, .factor = 4.0, .quantile = 0.9, .window = 10, .min_jobs = 3});
  BOOST_TEST(t.deadline(0, 30.0) == 30.0);  // no job yet: the timeout
  for (int k = 1; k <= 10; ++k) t.record(0, 0.1 * k);  // 0.1 .. 1.0: q90 = 0.9
  BOOST_TEST(t.quantile(0) == 0.9, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(t.deadline(0, 30.0) == 3.6, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(t.deadline(0, 2.0) == 2.0);  // the timeout bounds it
  t.record(0, 0.01);  // the window drops the oldest (0.1)
  BOOST_TEST(t.jobs(0) == 10u);
  for (int k = 0; k < 3; ++k) t.record(1, 0.01);
  BOOST_TEST(t.deadline(1, 30.0) == 0.5);  // 4 x 0.01 is below the floor
  t.forget(1);
  BOOST_TEST(t.deadline(1, 30.0) == 30.0);
  BOOST_CHECK_EXCEPTION((hr::deadline_rule{.quantile = 0.0}.validate()), std::invalid_argument,
                        [](const std::invalid_argument& e) { return std::string(e.what()).find("'deadline.quantile'") != std::string::npos; });
  BOOST_CHECK_EXCEPTION((hr::deadline_rule{.window = 2, .min_jobs = 3}.validate()), std::invalid_argument,
                        [](const std::invalid_argument& e) { return std::string(e.what()).find("'deadline.min_jobs'") != std::string::npos; });
  hr::membership_options m;
  m.absent = {1};
  BOOST_CHECK_EXCEPTION(m.validate(3), std::invalid_argument,
                        [](const std::invalid_argument& e) { return std::string(e.what()).find("needs membership.elastic") != std::string::npos; });
  m.elastic = true;
  m.absent = {1, 1};
  BOOST_CHECK_EXCEPTION(m.validate(3), std::invalid_argument,
                        [](const std::invalid_argument& e) { return std::string(e.what()).find("'membership.absent[1]'") != std::string::npos; });
}

// Hostile membership messages on a spare slot: a join naming another worker, a leave of a
// slot that is not a member, a joiner of another model size (refused by name on both
// sides): each refused and counted; the slot still joins properly afterwards and the run
// finishes.
BOOST_AUTO_TEST_CASE(malformed_membership_messages_are_refused_and_counted_and_the_server_keeps_running,
                     *boost::unit_test::timeout(120)) {
  async::asgd p(3, server(0.05));
  hr::remote_options o{.timeout = hg::seconds{30}, .max_updates = 300, .shutdown_grace = hg::seconds{30}};
  o.membership.elastic = true;
  o.membership.absent = {2};
  thread_group g(4);
  hr::remote_summary s;
  std::string refused_by_name;
  outcome joined;
  g.start(0, false, [&](comm_t c) { s = hr::serve<double>(p, c, o); });
  g.start(1, false, [&](comm_t c) { worker_loop(c, o, {}); });
  g.start(2, false, [&](comm_t c) { worker_loop(c, o, {}); });
  g.start(3, false, [&](comm_t c) {
    const hr::detail::tags tags(o.tag_base);
    auto send = [&](std::array<std::uint64_t, 4> h) {
      c.send(hg::span<const std::uint64_t>(h.data(), h.size()), 0, tags.result_header).wait();
    };
    send({hr::detail::join_kind, 7, 0, d});  // names worker 7 from worker 2's rank
    std::array<std::uint64_t, 5> answer{};    // the slot is absent: it is told why
    c.recv(hg::span<std::uint64_t>(answer.data(), answer.size()), 0, tags.job_header).wait();
    BOOST_TEST(answer[0] == hr::detail::join_refused_kind);
    BOOST_TEST(answer[1] == hr::detail::join_bad_worker);
    send({hr::detail::leave_kind, 2, 0, 0});  // slot 2 is not a member: counted, no answer
    try {
      client_t bad(c, d + 1, o, hr::joining);  // another model size
    } catch (const hg::comm::comm_error& e) {
      refused_by_name = e.what();
    }
    joined = worker_loop(c, o, {.joining = true});
  });
  const std::string error = g.finish();
  BOOST_TEST_REQUIRE(error.empty(), error);
  BOOST_TEST(p.version() == 300u);
  BOOST_TEST(s.refused == 3u);
  BOOST_REQUIRE(s.membership_refusals.size() == 3u);
  BOOST_TEST(s.membership_refusals[0] == "worker 2 (rank 3): join names worker 7");
  BOOST_TEST(s.membership_refusals[1] == "worker 2 (rank 3): leave: it is not a member");
  BOOST_TEST(s.membership_refusals[2] == "worker 2 (rank 3): join: it holds 7 parameters, the server's model has 6");
  BOOST_TEST(refused_by_name.find("join refused: worker 2 holds 7 parameters, the server's model has 6") != std::string::npos,
             refused_by_name);
  BOOST_TEST(s.evicted[2].empty());  // refused messages, not a broken worker
  BOOST_TEST_REQUIRE(joined.hash.has_value());
  BOOST_TEST(s.jobs_finished[2] > 0u);
  BOOST_TEST(s.jobs_finished[2] <= joined.jobs);  // its last push may come after the end
  BOOST_TEST(s.jobs_finished[2] + 1 >= joined.jobs);
  BOOST_TEST(s.membership.size() == 1u);
}

// The joiner checks the model's hash before it computes: a welcome whose parameters do not
// hash to what the header says (a corrupted or mismatched model) fails the join naming both.
BOOST_AUTO_TEST_CASE(a_joiner_refuses_a_model_whose_hash_differs_from_the_servers_before_computing,
                     *boost::unit_test::timeout(60)) {
  const hr::remote_options o{.timeout = hg::seconds{10}};
  std::string caught;
  hg::comm::inproc::spawn(2, [&](comm_t c) {
    const hr::detail::tags tags(o.tag_base);
    if (c.rank() == 0) {
      std::array<std::uint64_t, 4> join{};
      c.recv(hg::span<std::uint64_t>(join.data(), join.size()), 1, tags.result_header).wait();
      BOOST_TEST(join[0] == hr::detail::join_kind);
      BOOST_TEST(join[3] == d);
      const std::vector<double> x(d, 1.0);
      const std::uint64_t right = hg::fnv1a(x.data(), d * sizeof(double));
      const std::array<std::uint64_t, 5> welcome{hr::detail::welcome_kind, 5, right ^ 1, d, 0};
      c.send(hg::span<const std::uint64_t>(welcome.data(), welcome.size()), 1, tags.job_header).wait();
      c.send(hg::span<const double>(x.data(), x.size()), 1, tags.job_payload).wait();
    } else {
      try {
        client_t cl(c, d, o, hr::joining);
      } catch (const hg::comm::comm_error& e) {
        caught = e.what();
      }
    }
  });
  BOOST_TEST(caught.find("the joined model's FNV-1a") != std::string::npos, caught);
  BOOST_TEST(caught.find("nothing computed") != std::string::npos, caught);
}

// Jobs sent to a slot's earlier worker and never taken (a transport without world::rejoin
// keeps them) are discarded by the joiner, headers and payloads, one of another size too;
// then it takes the welcome, checks its hash, and its first pull gets the next message.
BOOST_AUTO_TEST_CASE(a_joiner_discards_the_jobs_left_for_its_slots_earlier_worker_before_the_welcome,
                     *boost::unit_test::timeout(60)) {
  const hr::remote_options o{.timeout = hg::seconds{10}};
  outcome got;
  std::uint64_t sent_hash = 0;
  hg::comm::inproc::spawn(2, [&](comm_t c) {
    const hr::detail::tags tags(o.tag_base);
    if (c.rank() == 0) {
      auto job = [&](std::uint64_t kind, std::uint64_t a, std::uint64_t b, const std::vector<double>& x) {
        const std::array<std::uint64_t, 5> h{kind, a, b, kind == hr::detail::welcome_kind ? d : 0, 1};
        c.send(hg::span<const std::uint64_t>(h.data(), h.size()), 1, tags.job_header).wait();
        if (!x.empty()) c.send(hg::span<const double>(x.data(), x.size()), 1, tags.job_payload).wait();
      };
      job(hr::detail::job_kind, 3, 7, std::vector<double>(d, 9.0));      // left for the earlier worker
      job(hr::detail::job_kind, 4, 8, std::vector<double>(d + 2, 9.0));  // of another size: discarded too
      std::array<std::uint64_t, 4> join{};
      c.recv(hg::span<std::uint64_t>(join.data(), join.size()), 1, tags.result_header).wait();
      const std::vector<double> x(d, 0.25);
      sent_hash = hg::fnv1a(x.data(), d * sizeof(double));
      job(hr::detail::welcome_kind, 12, sent_hash, x);
      job(hr::detail::stop_kind, 0, 0, {});
      std::array<std::uint64_t, 4> bye{};
      c.recv(hg::span<std::uint64_t>(bye.data(), bye.size()), 1, tags.result_header).wait();
      BOOST_TEST(bye[0] == hr::detail::bye_kind);
    } else {
      got = worker_loop(c, o, {.joining = true});
    }
  });
  BOOST_TEST_REQUIRE(got.hash.has_value());
  BOOST_TEST(*got.hash == sent_hash);
  BOOST_TEST(got.version == 12u);
  BOOST_TEST(got.jobs == 0u);  // the stale jobs were never computed; the stop ended it
}

// inproc's world::rejoin: a new thread takes a rank with an empty mailbox; a rendezvous send
// the earlier thread never took fails naming the restart; later messages reach the new thread.
BOOST_AUTO_TEST_CASE(inproc_rejoin_gives_a_new_thread_an_empty_mailbox_and_fails_the_sends_it_drops,
                     *boost::unit_test::timeout(60)) {
  hg::comm::inproc::world w(2);
  const comm_t server = w.rank(0);
  std::vector<double> big(hg::comm::inproc::eager_bytes / sizeof(double) + 16, 2.0);
  const std::array<double, 1> small{3.0};
  auto pending = server.send(hg::span<const double>(big.data(), big.size()), 1, 7);  // rendezvous: waits for a receive
  server.send(hg::span<const double>(small.data(), small.size()), 1, 7).wait();     // eager: queued
  BOOST_TEST(!pending.test());
  const comm_t fresh = w.rejoin(1);
  std::string why;
  try {
    pending.wait(hg::seconds{5});
  } catch (const hg::comm::comm_error& e) {
    why = e.what();
  }
  BOOST_TEST(why.find("rank 1 was restarted (world::rejoin)") != std::string::npos, why);
  const std::array<double, 1> later{4.0};
  server.send(hg::span<const double>(later.data(), later.size()), 1, 7).wait();
  std::array<double, 1> got{0.0};
  fresh.recv(hg::span<double>(got.data(), got.size()), 0, 7, {.timeout = hg::seconds{5}}).wait();
  BOOST_TEST(got[0] == 4.0);  // not the 3.0 sent to the earlier thread
  w.detail_end();
}

BOOST_AUTO_TEST_SUITE_END()
