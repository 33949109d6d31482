// Per-rank checkpoint parts over a transport (runtime/parts.hpp): a round trip hands every
// rank its part back; a size a peer announces above the bound is refused by name before
// anything is sized by it (issue 43: rank 0 resized its buffer to whatever the ranks summed).

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/comm/inproc.hpp"
#include "heterograd/runtime/parts.hpp"

namespace hg = heterograd;
namespace hr = heterograd::runtime;
namespace hi = heterograd::comm::inproc;

BOOST_AUTO_TEST_SUITE(checkpoint_parts)

BOOST_AUTO_TEST_CASE(gathered_parts_scatter_back_to_their_ranks_and_a_fresh_start_gets_none) {
  const hr::parts_options o{.limit = 1000, .timeout = hg::seconds{10}};
  std::vector<std::string> gathered, back(4, "x");
  hi::spawn(4, [&](hi::communicator c) {
    const std::string mine(static_cast<std::size_t>(100 * c.rank()), static_cast<char>('a' + c.rank()));
    auto g = hr::gather_parts(c, mine, o);
    if (c.rank() == 0) gathered = g;
    back[static_cast<std::size_t>(c.rank())] = hr::scatter_parts(c, g, o);
  });
  BOOST_REQUIRE(gathered.size() == 3u);
  for (std::size_t k = 1; k < 4; ++k) {
    BOOST_TEST(gathered[k - 1] == std::string(100 * k, static_cast<char>('a' + k)));
    BOOST_TEST(back[k] == gathered[k - 1]);
  }
  BOOST_TEST(back[0].empty());
  hi::spawn(3, [&](hi::communicator c) {
    BOOST_TEST(hr::scatter_parts(c, {}, o).empty());  // a fresh run: no parts, every rank ""
  });
}

BOOST_AUTO_TEST_CASE(a_part_size_above_the_bound_is_refused_naming_the_rank_before_anything_is_sized) {
  // Rank 2 announces 2^40 bytes (gather), or rank 0 announces 2^40 to rank 1 (scatter).
  const hr::parts_options o{.limit = 4096, .timeout = hg::seconds{5}};
  std::string gather_error, scatter_error;
  try {
    hi::spawn(3, [&](hi::communicator c) {
      if (c.rank() == 2) {  // a hostile rank: its announced size, then nothing
        const std::uint64_t lie = std::uint64_t{1} << 40;
        c.gather(hg::span<const std::uint64_t>(&lie, 1), hg::span<std::uint64_t>(), 0).wait();
        return;
      }
      (void)hr::gather_parts(c, std::string(10, 'p'), o);
    });
  } catch (const std::invalid_argument& e) {
    gather_error = e.what();
  }
  BOOST_TEST(gather_error.find("gather_parts.size") != std::string::npos, gather_error);
  BOOST_TEST(gather_error.find("1099511627776") != std::string::npos, gather_error);
  BOOST_TEST(gather_error.find("announced by rank 2") != std::string::npos, gather_error);
  try {
    hi::spawn(2, [&](hi::communicator c) {
      if (c.rank() == 0) {
        std::vector<std::uint64_t> sizes{0, std::uint64_t{1} << 40};
        c.broadcast(hg::span<std::uint64_t>(sizes), 0).wait();
        return;
      }
      (void)hr::scatter_parts(c, {}, o);
    });
  } catch (const std::invalid_argument& e) {
    scatter_error = e.what();
  }
  BOOST_TEST(scatter_error.find("scatter_parts.size") != std::string::npos, scatter_error);
  BOOST_TEST(scatter_error.find("at most parts_options.limit (4096 bytes; announced by rank 0)") != std::string::npos,
             scatter_error);
}

BOOST_AUTO_TEST_SUITE_END()
