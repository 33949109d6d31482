#pragma once
// The rules of a method's own keys against the rest of the configuration (a registry row's
// `check`, registry.hpp), after every key obeys its own rule: config.cpp's check_cross calls
// the row of each method, so no rule here is chosen by the method's name. Each names the key.

#include <cstddef>
#include <string>

#include "config.hpp"
#include "described.hpp"
#include "experiment.hpp"

namespace hgrun {

/// OmniLearn's controller (the round method's and the ASP server's): min_batch <= max_batch.
inline void check_batch_range(json& m, const json&, const std::string& p) {
  if (m["min_batch"].get<std::size_t>() > m["max_batch"].get<std::size_t>())
    throw config_error(p + ".min_batch", "expected <= max_batch (" + m["max_batch"].dump() + "), got " +
                                             m["min_batch"].dump());
}

/// Per-worker H_i: one per worker when given (required: biased local SGD).
inline void check_local_steps(const json& m, const std::string& p, std::size_t n, bool required) {
  if (required && m["local_steps"].empty()) throw config_error(p + ".local_steps", "missing; expected one H_i per worker");
  if (!m["local_steps"].empty() && m["local_steps"].size() != n)
    throw config_error(p + ".local_steps", "expected " + std::to_string(n) + " values (one per worker), got " +
                                               std::to_string(m["local_steps"].size()));
}

/// Local SGD: its H_i, and FedAvg's sampling and gossip (the library's rules, named by key).
inline void check_local_sgd(json& m, const json& c, const std::string& p) {
  const std::size_t n = c["workers"]["count"].get<std::size_t>();
  if (m["sampled"].get<std::size_t>() > n)
    throw config_error(p + ".sampled", "expected at most workers.count = " + std::to_string(n) + ", got " +
                                           m["sampled"].dump());
  if (m["gossip"] != "none") {
    if (m["sampled"].get<std::size_t>() != 0)
      throw config_error(p + ".gossip", "expected \"none\" with " + p + ".sampled = " + m["sampled"].dump() +
                                            ": gossip averages every worker with its neighbours each round");
    if (m["states"] == "average")
      throw config_error(p + ".states", "expected \"keep_local\" or \"reset\" with " + p +
                                            ".gossip: there is no global average of the optimizer states");
    if (m["weighting"] == "fednova")
      throw config_error(p + ".weighting", "expected a weighting other than \"fednova\" with " + p +
                                               ".gossip (FedNova normalises a global average)");
  }
  check_local_steps(m, p, n, false);
}

/// Biased local SGD: one H_i per worker, slow workers among the run's.
inline void check_biased_local_sgd(json& m, const json& c, const std::string& p) {
  const std::size_t n = c["workers"]["count"].get<std::size_t>();
  check_local_steps(m, p, n, true);
  for (std::size_t j = 0; j < m["slow_workers"].size(); ++j)
    if (m["slow_workers"][j].get<std::size_t>() >= n)
      throw config_error(p + ".slow_workers[" + std::to_string(j) + "]",
                         "expected a worker index < workers.count = " + std::to_string(n));
}

/// Local learning: an image classifier; an MLP splits at its dense layers (a torch model's
/// split is checked when preflight builds it).
inline void check_local_learning(json& m, const json& c, const std::string& p) {
  const json& d = c["data"];
  const model_settings model = from_json(c["model"], model_settings{});
  if (d["dataset"] != "fashion_mnist")
    throw config_error(p + ".algorithm", "local_learning needs data.dataset \"fashion_mnist\" (an image "
                                         "classifier: model.kind \"mlp\", or \"torch\" with an image preset), got " +
                                             d["dataset"].dump());
  if (model.kind != model_kind::mlp) return;
  if (!m["split"].empty())
    throw config_error(p + ".split", "expected [] with model.kind \"mlp\" (an MLP splits into " + p +
                                         ".modules parts at its dense layers), got " + m["split"].dump());
  const std::size_t layers = model.hidden.size() + 1;
  if (m["modules"].get<std::size_t>() > layers)
    throw config_error(p + ".modules", "expected at most the number of dense layers (" + std::to_string(layers) +
                                           "), got " + m["modules"].dump());
}

}  // namespace hgrun
