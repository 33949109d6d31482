// The transport concept: the archetypes (positive and negative) and the real transports.

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "heterograd/comm/concepts.hpp"
#include "heterograd/comm/detail/frontend.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/testing/comm_archetypes.hpp"
#include "messages.hpp"

namespace hg = heterograd;
namespace hc = heterograd::comm;
namespace ht = heterograd::testing;

static_assert(hc::transport<hc::inproc::communicator>);
static_assert(hc::request_like<hc::request> && hc::receive_request_like<hc::request>);

BOOST_AUTO_TEST_SUITE(comm_concepts)

BOOST_AUTO_TEST_CASE(archetypes_are_accepted_and_each_negative_one_is_rejected) {
  BOOST_TEST(hc::transport<ht::transport_archetype>);
  BOOST_TEST(!hc::transport<ht::not_a_transport_no_recv>);
  BOOST_TEST(!hc::transport<ht::not_a_transport_blocking_allreduce>);
  BOOST_TEST(!hc::transport<ht::not_a_transport_move_only>);
  BOOST_TEST(hc::request_like<ht::request_archetype>);
  BOOST_TEST(!hc::request_like<ht::not_a_request_unbounded_wait>);
  BOOST_TEST((hc::collective_transport<ht::device_collective_archetype, hg::device_space>));
  BOOST_TEST(!hc::transport<ht::device_collective_archetype>);
}

BOOST_AUTO_TEST_CASE(an_algorithm_written_against_the_concept_runs_on_the_archetype) {
  auto average = [](const hc::transport auto& t, hg::span<float> g) {
    hc::allreduce_options o;
    o.op = hc::reduce_op::avg;
    auto r = t.allreduce(g, o);
    r.wait(hc::default_timeout);
    return t.size();
  };
  float g[3] = {1, 2, 3};
  BOOST_TEST(average(ht::transport_archetype{}, hg::span<float>(g, 3)) == 1);
}

BOOST_AUTO_TEST_CASE(options_default_to_a_finite_timeout_and_reject_non_positive_ones) {
  BOOST_TEST(hc::allreduce_options{}.timeout.count() > 0.0);
  BOOST_TEST(hc::allreduce_options{}.timeout.count() < 1e9);
  BOOST_TEST(hc::recv_options{}.timeout == hc::default_timeout);
  hc::allreduce_options o;
  o.timeout = hg::seconds{0};
  BOOST_CHECK_THROW(hc::detail::validate(o), std::invalid_argument);
  o.timeout = hg::seconds{1};
  o.weight = -1.0;
  BOOST_CHECK_THROW(hc::detail::validate(o), std::invalid_argument);
  o.weight = 1.0;
  o.op = hc::reduce_op::max;
  BOOST_CHECK_THROW(hc::detail::validate(o), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(a_request_stores_its_error_and_wait_rethrows_it_every_time) {
  auto r = hc::request::failed(std::make_exception_ptr(hc::timeout_error("late")));
  BOOST_TEST(r.test());
  BOOST_CHECK_THROW(r.wait(), hc::timeout_error);
  BOOST_CHECK_THROW(r.wait(), hc::timeout_error);
  BOOST_TEST(static_cast<bool>(r.error()));
  hc::request empty;
  BOOST_TEST(empty.test());
  BOOST_CHECK_NO_THROW(empty.wait());
}

namespace {

/// A handle as the front-end's checks see it.
struct fake_handle {
  bool ok = true;
  int r = 0;
  int n = 4;
  bool valid() const { return ok; }
  int rank() const { return r; }
  int size() const { return n; }
};

using hg_test::invalid_argument_message;

}  // namespace

BOOST_AUTO_TEST_CASE(the_front_end_checks_timeout_then_handle_then_the_call_and_names_the_field) {
  const fake_handle h;
  hc::broadcast_options late;
  late.timeout = hg::seconds{0};
  fake_handle empty;
  empty.ok = false;
  // Order: the timeout before the handle, the handle before the root.
  BOOST_TEST(invalid_argument_message([&] {
               hc::detail::check_broadcast(empty, 9, late);
             }).find("broadcast_options.timeout") != std::string::npos);
  BOOST_TEST(invalid_argument_message([&] {
               hc::detail::check_broadcast(empty, 9, {});
             }).find("'communicator'") != std::string::npos);
  BOOST_TEST(invalid_argument_message([&] {
               hc::detail::check_broadcast(h, 9, {});
             }).find("broadcast.root") != std::string::npos);
  // gather's output size is the root's business only.
  BOOST_TEST(invalid_argument_message([&] { hc::detail::check_gather(h, 2, 0, 1, {}); }) == "");
  BOOST_TEST(invalid_argument_message([&] {
               hc::detail::check_gather(h, 2, 0, 0, {});
             }).find("gather.out") != std::string::npos);
  BOOST_TEST(invalid_argument_message([&] { hc::detail::check_reduce_scatter(h, 8, 2, {}); }) ==
             "");
  BOOST_TEST(invalid_argument_message([&] {
               hc::detail::check_allgather(h, 2, 7, {});
             }).find("allgather.out") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_tag_rule_is_the_backends_bound_and_any_tag_only_where_a_receive_allows_it) {
  const fake_handle h;
  BOOST_TEST(invalid_argument_message([&] { hc::detail::check_send(h, 1, 32767, 32767, {}); }) ==
             "");
  BOOST_TEST(invalid_argument_message([&] { hc::detail::check_send(h, 1, 32768, 32767, {}); }) ==
             "heterograd: invalid argument 'send.tag' = 32768: must be in [0, 32767]");
  BOOST_TEST(invalid_argument_message([&] {
               hc::detail::check_send(h, 1, hc::any_tag, hc::detail::unbounded_tag, {});
             }) == "heterograd: invalid argument 'send.tag' = -1: must be >= 0");
  BOOST_TEST(invalid_argument_message(
                 [&] { hc::detail::check_recv(h, hc::any_source, hc::any_tag, 32767, {}); }) == "");
  BOOST_TEST(invalid_argument_message([&] { hc::detail::check_recv(h, 0, -2, 32767, {}); }) ==
             "heterograd: invalid argument 'recv.tag' = -2: must be in [0, 32767] or any_tag");
  BOOST_TEST(invalid_argument_message([&] {
               hc::detail::check_recv(h, 4, 0, 32767, {});
             }).find("recv.source") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(schedule_tags_take_two_per_call_and_wrap_below_the_mpi_abort_tag) {
  hc::detail::schedule_tags tags;
  BOOST_TEST(tags.take() == 0);
  BOOST_TEST(tags.take() == 2);
  int highest = 2;
  for (int i = 2; i < hc::detail::schedule_tag_end / 2; ++i) highest = std::max(highest, tags.take());
  BOOST_TEST(highest + 1 < 32767);  // a weighted call also uses tag + 1
  BOOST_TEST(tags.take() == 0);     // every tag was used once: the cycle starts again
}

BOOST_AUTO_TEST_SUITE_END()
