#pragma once
// The threads of runtime::run's server on where::threads (real_server.hpp): one inproc world,
// rank 0 the server's thread and rank w + 1 worker w's, where a rank may be restarted on a
// new thread (world::rejoin) once its thread has ended: an elastic run's joins. As inproc's
// spawn: a thread that throws aborts the world (its peers' pending operations fail instead of
// waiting for it) and finish() rethrows the first error once every thread has ended.

#include <atomic>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "heterograd/comm/inproc.hpp"

namespace heterograd::runtime::detail {

class thread_crew {
 public:
  explicit thread_crew(int n) : w_(n), running_(std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(n))) {}
  thread_crew(const thread_crew&) = delete;
  thread_crew& operator=(const thread_crew&) = delete;
  ~thread_crew() {
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

  /// Runs f(communicator) on a new thread as rank r (restart: rank r's earlier thread ended,
  /// the new one takes an empty mailbox).
  template <class F>
  void start(int r, bool restart, F f) {
    comm::inproc::communicator c = restart ? w_.rejoin(r) : w_.rank(r);
    running_[static_cast<std::size_t>(r)] = true;
    std::lock_guard l(m_);
    try {
      threads_.emplace_back([this, r, c, f = std::move(f)]() mutable {
        try {
          f(c);
        } catch (...) {
          fail(r, std::current_exception());
        }
        running_[static_cast<std::size_t>(r)] = false;
      });
    } catch (...) {  // no thread: the ranks running would wait for it
      running_[static_cast<std::size_t>(r)] = false;
      keep(std::current_exception());
      w_.abort(r, "heterograd: runtime: could not start the thread of rank " + std::to_string(r));
    }
  }
  bool running(int r) const { return running_[static_cast<std::size_t>(r)]; }
  bool failed() const { return w_.aborted(); }
  /// Fails what rank r's thread is waiting for (a posted receive), as a restart does.
  void interrupt(int r) const { (void)w_.rejoin(r); }

  /// Joins every thread, then rethrows the first error.
  void finish() {
    {
      std::lock_guard l(m_);
      for (auto& t : threads_) t.join();
      threads_.clear();
    }
    w_.detail_end();
    if (first_) std::rethrow_exception(first_);
  }

 private:
  void keep(std::exception_ptr e) {
    std::lock_guard l(error_m_);
    if (!first_) first_ = std::move(e);
  }
  void fail(int r, std::exception_ptr e) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
    }
    keep(std::move(e));
    w_.abort(r, what);
  }

  comm::inproc::world w_;
  std::unique_ptr<std::atomic<bool>[]> running_;
  std::mutex m_, error_m_;
  std::vector<std::thread> threads_;
  std::exception_ptr first_;
};

}  // namespace heterograd::runtime::detail
