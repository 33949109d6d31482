// The Boost.Test runner, compiled once and linked into every test executable.
#define BOOST_TEST_MODULE heterograd
#include <boost/test/included/unit_test.hpp>
