#pragma once
// What makes a resumed run the run it continues. A checkpoint and the output folder's
// config.json each record the inputs that determine the results; --resume compares them with
// the new ones and refuses, naming the keys that differ, so that results of one configuration
// are never reported as another's. Where the results go (output), how often checkpoints are
// taken (checkpoint_every) and how the command was typed (--jobs, --resume) are not inputs:
// a run started with --jobs 2 resumes with --jobs 1 or 4 and from a moved folder.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config.hpp"

namespace hgrun {

/// The resolved configuration `config` as far as it determines the results: without output,
/// checkpoint_every and main's "resolved" bookkeeping (seed list, command line), but with the
/// code revision ("resolved.git_revision", when the block is there).
inline json result_inputs(const json& config) {
  json c = config;
  if (!c.is_object()) return c;
  c.erase("output");
  c.erase("checkpoint_every");
  if (config.contains("resolved") && config["resolved"].is_object()) {
    const json& r = config["resolved"];
    c["resolved"] = json::object();
    if (r.contains("git_revision")) c["resolved"]["git_revision"] = r["git_revision"];
  }
  return c;
}

/// What determines one method's results for one seed (a checkpoint's identity): the result
/// inputs shared by all methods, this method's entry, and the seed. The other methods, the
/// baseline and the report's texts (name, title, paper) do not change this method's numbers.
inline json unit_inputs(const json& config, const json& method, std::uint64_t seed) {
  json c = result_inputs(config);
  for (const char* k : {"methods", "baseline", "name", "title", "paper", "tiny"}) c.erase(k);
  return json{{"config", c}, {"method", method}, {"seed", seed}};
}

namespace detail {
inline std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}
inline void differences(const json& a, const json& b, const std::string& path, std::vector<std::string>& out) {
  if (a.is_object() && b.is_object()) {
    std::vector<std::string> keys;
    for (auto it = a.begin(); it != a.end(); ++it) keys.push_back(it.key());
    for (auto it = b.begin(); it != b.end(); ++it)
      if (!a.contains(it.key())) keys.push_back(it.key());
    for (const auto& k : keys) {
      const std::string p = path.empty() ? k : path + "." + k;
      if (!a.contains(k)) out.push_back(p + ": (none) -> " + shown(b[k]));
      else if (!b.contains(k)) out.push_back(p + ": " + shown(a[k]) + " -> (none)");
      else differences(a[k], b[k], p, out);
    }
  } else if (a.is_array() && b.is_array() && a.size() == b.size()) {
    for (std::size_t i = 0; i < a.size(); ++i) differences(a[i], b[i], path + "[" + std::to_string(i) + "]", out);
  } else if (a != b) {
    out.push_back((path.empty() ? std::string("<root>") : path) + ": " + shown(a) + " -> " + shown(b));
  }
}
}  // namespace detail

/// The key paths where `before` and `now` differ, as "methods[1].threshold: 6 -> 8" (arrays of
/// different lengths and values of different types as one line each).
inline std::vector<std::string> differences(const json& before, const json& now) {
  std::vector<std::string> out;
  detail::differences(before, now, "", out);
  return out;
}

/// differences() as one line: the first `most` of them, then how many more.
inline std::string differences_text(const json& before, const json& now, std::size_t most = 8) {
  const auto d = differences(before, now);
  std::string s;
  for (std::size_t i = 0; i < std::min(d.size(), most); ++i) s += (i ? "; " : "") + d[i];
  if (d.size() > most) s += "; and " + std::to_string(d.size() - most) + " more";
  return s;
}

}  // namespace hgrun
