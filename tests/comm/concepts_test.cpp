// The transport concept: the archetypes (positive and negative) and the real transports.

#include <boost/test/unit_test.hpp>

#include "heterograd/comm/concepts.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/testing/comm_archetypes.hpp"

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

BOOST_AUTO_TEST_SUITE_END()
