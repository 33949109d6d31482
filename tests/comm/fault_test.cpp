// Faults and bad input on the inproc transport: each surfaces as an exception on every rank,
// never as a hang (this executable runs under a 30 s CTest timeout).

#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "comm_test_support.hpp"
#include "heterograd/comm/inproc.hpp"

namespace hg = heterograd;
namespace hc = heterograd::comm;
namespace hi = heterograd::comm::inproc;

namespace {

/// What each rank ended with: "" (no error) or the error's type and message.
struct outcomes {
  std::mutex m;
  std::vector<std::string> kind;
  std::vector<std::string> what;
  explicit outcomes(int n) : kind(static_cast<std::size_t>(n)), what(static_cast<std::size_t>(n)) {}
  template <class F>
  void run(int r, F&& f) {
    std::string k, w;
    try {
      f();
    } catch (const hc::aborted_error& e) {
      k = "aborted";
      w = e.what();
    } catch (const hc::timeout_error& e) {
      k = "timeout";
      w = e.what();
    } catch (const hc::mismatch_error& e) {
      k = "mismatch";
      w = e.what();
    } catch (const hc::truncation_error& e) {
      k = "truncation";
      w = e.what();
    } catch (const std::exception& e) {
      k = "other";
      w = e.what();
    }
    std::lock_guard<std::mutex> l(m);
    kind[static_cast<std::size_t>(r)] = k;
    what[static_cast<std::size_t>(r)] = w;
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(inproc_faults)

BOOST_AUTO_TEST_CASE(a_rank_that_throws_fails_every_pending_operation_and_spawn_rethrows_its_error) {
  const int n = 4;
  outcomes out(n);
  BOOST_CHECK_EXCEPTION(
      hi::spawn(n,
                [&](hi::communicator c) {
                  if (c.rank() == 2) throw std::logic_error("rank 2 failed its step");
                  out.run(c.rank(), [&] {
                    std::vector<float> v(1000, 1.0f);
                    c.allreduce(hg::span<float>(v)).wait();
                  });
                }),
      std::logic_error,
      [](const std::logic_error& e) { return std::string(e.what()) == "rank 2 failed its step"; });
  for (int r : {0, 1, 3}) {
    BOOST_TEST(out.kind[static_cast<std::size_t>(r)] == "aborted");
    BOOST_TEST(out.what[static_cast<std::size_t>(r)].find("aborted by rank 2") != std::string::npos);
    BOOST_TEST(out.what[static_cast<std::size_t>(r)].find("rank 2 failed its step") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(a_rank_that_never_arrives_times_out_on_the_manual_clock_and_aborts_the_others) {
  hg::manual_clock clock;
  const int n = 3;
  outcomes out(n);
  std::atomic<int> posted{0};
  hi::spawn(
      n,
      [&](hi::communicator c) {
        out.run(c.rank(), [&] {
          std::vector<int> v(10, 1);
          if (c.rank() == 2) {
            // Never joins the allreduce: waits until both peers posted, then lets time pass.
            while (posted.load() < 2) std::this_thread::yield();
            clock.advance(hg::seconds{100});
            std::vector<int> w(1);
            c.recv(hg::span<int>(w), 0, 0).wait();  // fails once the world is aborted
            return;
          }
          hc::allreduce_options o;
          o.timeout = hg::seconds{5};  // virtual seconds
          auto r = c.allreduce(hg::span<int>(v), o);
          ++posted;
          r.wait();
        });
      },
      clock);
  // One of ranks 0/1 times out first and aborts; the other sees the abort (or its own timeout).
  int timeouts = 0;
  for (int r = 0; r < 2; ++r) {
    const auto& k = out.kind[static_cast<std::size_t>(r)];
    BOOST_TEST((k == "timeout" || k == "aborted"));
    timeouts += k == "timeout";
  }
  BOOST_TEST(timeouts >= 1);
  BOOST_TEST(out.kind[2] == "aborted");
  BOOST_TEST(out.what[2].find("timed out") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_real_time_deadline_is_never_early_and_counts_from_the_first_unfinished_check) {
  // Rank 1 never arrives. Rank 0 posts with a 0.2 s timeout, works 0.1 s, then waits: the
  // deadline is read at that wait (the post's own clock read is skipped), so the timeout
  // comes at least 0.2 s after the wait began, and never before 0.2 s after the post.
  const double timeout = 0.2, work = 0.1;
  using clk = std::chrono::steady_clock;
  outcomes out(2);
  double from_post = 0, from_wait = 0;
  std::atomic<bool> done{false};
  hi::spawn(2, [&](hi::communicator c) {
    out.run(c.rank(), [&] {
      if (c.rank() == 1) {
        while (!done && !c.aborted()) std::this_thread::yield();
        return;
      }
      std::vector<int> v(4, 1);
      hc::allreduce_options o;
      o.timeout = hg::seconds{timeout};
      const auto t0 = clk::now();
      auto r = c.allreduce(hg::span<int>(v), o);
      std::this_thread::sleep_for(std::chrono::duration<double>(work));
      const auto t1 = clk::now();
      try {
        r.wait();
      } catch (...) {
        from_post = std::chrono::duration<double>(clk::now() - t0).count();
        from_wait = std::chrono::duration<double>(clk::now() - t1).count();
        done = true;
        throw;
      }
    });
  });
  BOOST_TEST(out.kind[0] == "timeout");
  BOOST_TEST(from_post >= timeout);
  BOOST_TEST(from_wait >= timeout);
  BOOST_TEST(from_wait < timeout + 5.0);  // it does come (a loaded machine may delay it)
}

BOOST_AUTO_TEST_CASE(mismatched_sizes_types_and_operators_throw_on_every_rank_and_leave_the_group_usable) {
  const int n = 3;
  for (int variant = 0; variant < 4; ++variant) {
    outcomes out(n);
    hi::spawn(n, [&](hi::communicator c) {
      out.run(c.rank(), [&] {
        std::vector<float> f(c.rank() == 1 && variant == 0 ? 11 : 10, 1.0f);
        std::vector<double> d(10, 1.0);
        hc::allreduce_options o;
        if (variant == 2 && c.rank() == 0) o.op = hc::reduce_op::max;
        if (variant == 3 && c.rank() == 2) o.weight = 2.0;
        if (variant == 1 && c.rank() == 2)
          c.allreduce(hg::span<double>(d), o).wait();
        else
          c.allreduce(hg::span<float>(f), o).wait();
      });
      // Still usable afterwards.
      std::vector<int> v{1};
      c.allreduce(hg::span<int>(v)).wait();
      comm_test::expect(v[0] == n, "group usable after a mismatch");
    });
    for (int r = 0; r < n; ++r) {
      BOOST_TEST(out.kind[static_cast<std::size_t>(r)] == "mismatch", "variant " << variant << " rank " << r);
      BOOST_TEST(out.what[static_cast<std::size_t>(r)].find("mismatched allreduce") != std::string::npos);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_different_collective_on_one_rank_is_a_mismatch_everywhere) {
  outcomes out(2);
  hi::spawn(2, [&](hi::communicator c) {
    out.run(c.rank(), [&] {
      std::vector<int> v{1};
      if (c.rank() == 0)
        c.broadcast(hg::span<int>(v), 0).wait();
      else
        c.allreduce(hg::span<int>(v)).wait();
    });
  });
  BOOST_TEST(out.kind[0] == "mismatch");
  BOOST_TEST(out.kind[1] == "mismatch");
}

BOOST_AUTO_TEST_CASE(a_receive_into_a_too_small_buffer_fails_the_receiver_and_a_rendezvous_sender) {
  for (std::size_t bytes : {std::size_t{64}, hi::eager_bytes * 2}) {
    outcomes out(2);
    hi::spawn(2, [&](hi::communicator c) {
      out.run(c.rank(), [&] {
        if (c.rank() == 0) {
          std::vector<std::uint8_t> m(bytes, 1);
          c.send(hg::span<const std::uint8_t>(m), 1, 3).wait();
        } else {
          std::vector<std::uint8_t> m(bytes / 2);
          c.recv(hg::span<std::uint8_t>(m), 0, 3).wait();
        }
      });
    });
    BOOST_TEST(out.kind[1] == "truncation");
    BOOST_TEST(out.what[1].find(std::to_string(bytes) + " bytes") != std::string::npos);
    // An eager send completed before the receive was posted; a rendezvous one learns it.
    BOOST_TEST(out.kind[0] == (bytes > hi::eager_bytes ? "truncation" : ""));
  }
}

BOOST_AUTO_TEST_CASE(a_message_of_another_element_type_is_a_mismatch) {
  outcomes out(2);
  hi::spawn(2, [&](hi::communicator c) {
    out.run(c.rank(), [&] {
      if (c.rank() == 0) {
        std::vector<float> m(4, 1.0f);
        c.send(hg::span<const float>(m), 1, 0).wait();
      } else {
        std::vector<std::int32_t> m(4);
        c.recv(hg::span<std::int32_t>(m), 0, 0).wait();
      }
    });
  });
  BOOST_TEST(out.kind[1] == "mismatch");
}

BOOST_AUTO_TEST_CASE(a_receive_that_times_out_is_withdrawn_and_the_group_stays_usable) {
  hg::manual_clock clock;
  outcomes out(2);
  std::atomic<bool> posted{false};
  hi::spawn(
      2,
      [&](hi::communicator c) {
        if (c.rank() == 1) {
          while (!posted) std::this_thread::yield();
          clock.advance(hg::seconds{10});
        } else {
          out.run(0, [&] {
            std::vector<int> m(1);
            hc::recv_options o;
            o.timeout = hg::seconds{1};
            auto r = c.recv(hg::span<int>(m), 1, 4, o);
            posted = true;
            r.wait();
          });
        }
        c.barrier().wait();
        // The withdrawn receive does not swallow the next message.
        std::vector<int> m{c.rank() == 1 ? 42 : 0};
        if (c.rank() == 1) {
          c.send(hg::span<const int>(m), 0, 4).wait();
        } else {
          c.recv(hg::span<int>(m), 1, 4).wait();
          comm_test::expect(m[0] == 42, "message after a withdrawn receive");
        }
      },
      clock);
  BOOST_TEST(out.kind[0] == "timeout");
}

BOOST_AUTO_TEST_CASE(using_a_transport_after_abort_fails_every_operation_with_the_abort_reason) {
  hi::world w(2);
  auto c0 = w.rank(0), c1 = w.rank(1);
  c1.abort("operator stopped the job");
  std::vector<float> v(3);
  auto check = [](hc::request r) {
    try {
      r.wait();
    } catch (const hc::aborted_error& e) {
      return e.rank() == 1 && std::string(e.what()).find("operator stopped the job") != std::string::npos;
    }
    return false;
  };
  BOOST_TEST(check(c0.allreduce(hg::span<float>(v))));
  BOOST_TEST(check(c0.send(hg::span<const float>(v), 1, 0)));
  BOOST_TEST(check(c0.recv(hg::span<float>(v), hc::any_source, hc::any_tag)));
  BOOST_TEST(check(c1.barrier()));
  BOOST_CHECK_THROW(c0.split(0, 0), hc::aborted_error);
  BOOST_TEST(c0.aborted());
}

BOOST_AUTO_TEST_CASE(an_owner_computes_allreduce_aborted_mid_flight_never_writes_after_failing) {
  // Rank 1 aborts while rank 0 waits in a large allreduce: rank 0 must fail, and rank 1's
  // later buffers stay untouched (no write into memory whose request already failed).
  for (int trial = 0; trial < 20; ++trial) {
    outcomes out(2);
    std::vector<float> a(200000, 1.0f);
    hi::spawn(2, [&](hi::communicator c) {
      out.run(c.rank(), [&] {
        if (c.rank() == 0) {
          c.allreduce(hg::span<float>(a)).wait();
        } else {
          if (trial % 2) std::this_thread::yield();
          c.abort("stop");
        }
      });
    });
    BOOST_TEST(out.kind[0] == "aborted");
  }
}

BOOST_AUTO_TEST_SUITE_END()
