#pragma once
// What config.cpp (the schema, resolve) and config_checks.cpp (the rules between keys and
// the bounds on work and memory) share; nothing outside the two includes it.

#include <string>

#include "config.hpp"

namespace hgrun {

struct algorithm_row;

namespace config_detail {

/// A number as the errors write it (integers without a point).
std::string fmt(double x);
/// A JSON value as the errors quote it (at most 60 characters, invalid UTF-8 replaced).
std::string shown(const json& v);
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
