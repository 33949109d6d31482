#pragma once
// What config.cpp (the schema, resolve), config_validate.cpp (the checker and the parser) and
// config_checks.cpp (the rules between keys and the bounds on work and memory) share; nothing
// outside them includes it.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config.hpp"
#include "schema.hpp"

namespace hgrun {

struct algorithm_row;

namespace config_detail {

/// A number as the errors write it (integers without a point).
std::string fmt(double x);
/// A JSON value as the errors quote it (at most 60 characters, invalid UTF-8 replaced).
std::string shown(const json& v);
/// "an integer in [0, 1e15]", "one of \"a\", \"b\"": what a value of `s` must be.
std::string expected(const schema::spec& s);
/// Throws config_error at `path`: expected(s), got v.
[[noreturn]] void fail(const std::string& path, const schema::spec& s, const json& v);
/// `v` checked against the object spec `s` at `path`, with the defaults of the keys it lacks.
json check_object(const schema::spec& s, const json& v, const std::string& path);
/// "data.dataset is \"text\" and ...": the conditions as the errors and the docs write them.
std::string applies_text(const std::vector<schema::condition>& all);
/// Refuses a key that `given` holds where its conditions (spec::applies, and `inherited`: the
/// objects' above) do not hold in `resolved`.
void check_applies(const schema::spec& s, const json& given, const json& resolved, const std::string& path,
                   const std::vector<schema::condition>& inherited);
/// Parses `text`; nullopt when it is not JSON (then `why` says where), config_error when it is
/// JSON that no configuration may hold (too deep, duplicate keys).
std::optional<json> parse_limited(std::string_view text, const std::string& prefix, std::string& why);
/// The registry row of algorithm `a` (nullptr: none).
const algorithm_row* row_of(const std::string& a);
/// The rules between keys, after every key obeyed its own; settles the defaults that depend
/// on other keys (the batch, the baseline, the output folder, the target's window).
void check_cross(json& c);
/// The bounds on the complete document: evaluations, gradients per update and per run, workers
/// against the data and the threads, the memory the run needs against this machine's.
void check_bounds(const json& c);

}  // namespace config_detail
}  // namespace hgrun
