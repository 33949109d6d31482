#pragma once
// The seams of the data problems: workers' sample streams, the classifier a classification
// problem trains, and the LibTorch problems (run_torch.cpp), which the other translation units
// reach without LibTorch's headers.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "heterograd/core/archive.hpp"
#include "heterograd/data/dataset.hpp"
#include "heterograd/data/partition.hpp"
#include "heterograd/nn/mlp.hpp"
#include "run.hpp"

namespace hgrun {

/// Every worker's stream of sample indices: its shard in a fresh order every epoch, a pure
/// function of (seed, worker, epoch). Worker w's calls touch only w's stream (workers draw
/// concurrently under the threads runtime).
class sample_streams {
 public:
  sample_streams() = default;
  sample_streams(heterograd::data::partition shards, std::uint64_t seed, std::size_t total);
  /// The next b indices of worker w's stream. The batch may come from a peer (a server's job
  /// header under MPI): more samples than the training set (what the config allows, data.batch's
  /// rule) is refused, never allocated.
  void draw(std::size_t w, std::size_t b, std::vector<std::size_t>& idx);
  /// Worker w's stream as it is after `drawn` samples. The stream turns to the next epoch
  /// lazily (at the next sample): `drawn` a whole number of epochs leaves it at the end of the
  /// last one, as the draws themselves do.
  void seek(std::size_t w, std::uint64_t drawn);
  void save(heterograd::archive_writer& a) const { a(epoch_, pos_); }
  void load(heterograd::archive_reader& a);
  std::size_t workers() const { return shards_.size(); }

 private:
  void shuffle(std::size_t w);
  std::uint64_t seed_ = 0;
  std::size_t total_ = 0;
  heterograd::data::partition shards_;
  std::vector<std::uint64_t> epoch_, pos_;
  std::vector<std::vector<std::size_t>> perm_;
};

/// The model of a classification problem: parameters in one flat float vector, gradients
/// keyed by worker (each worker uses its own model instance: workers call concurrently), and
/// the test set's loss and accuracy.
class classifier {
 public:
  virtual ~classifier() = default;
  virtual std::size_t num_params() const = 0;
  virtual std::vector<float> initial() const = 0;
  /// Called once with the training set before any gradient (what a model derives from it,
  /// such as input statistics).
  virtual void prepare(const heterograd::data::dataset& /*train*/) {}
  /// Worker w's mean loss on the batch and its gradient at x (per-sample losses too when
  /// per_sample_loss is not empty).
  virtual double loss_and_gradient(std::size_t w, std::span<const float> x, const heterograd::nn::batch<float>& b,
                                   std::span<float> g, std::span<float> per_sample_loss) = 0;
  /// x on `test` (`train`: for models whose evaluation reads training data, batch norm's
  /// statistics).
  virtual heterograd::nn::eval_result evaluate(std::span<const float> x, const heterograd::data::dataset& test,
                                               const heterograd::data::dataset& train) = 0;
  /// The model split into modules over the same flat parameters (problem::module_chain).
  virtual heterograd::algorithms::decoupled::any_chain module_chain(const chain_request& r) = 0;
};

/// Fashion-MNIST (config c's data keys) split over `workers`, trained as `model`.
std::unique_ptr<problem> make_classification(const json& c, std::unique_ptr<classifier> model, std::size_t workers,
                                             std::uint64_t seed);

/// run_torch.cpp: model.kind "torch" on fashion_mnist (model.preset lenet5, resnet8), and a
/// byte-level language model on data.dataset "text" (preset transformer). Without LibTorch built
/// in (HG_HAS_TORCH) both throw config_error naming model.kind.
std::unique_ptr<classifier> make_torch_classifier(const experiment& e, const json& c, std::uint64_t seed);
std::unique_ptr<problem> make_text_problem(const experiment& e, const json& c, std::uint64_t seed);

}  // namespace hgrun
