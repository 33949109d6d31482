#pragma once
// Decoupled, locally supervised training (DGL / InfoPro style) with PGL's periodic global
// guidance (#8, Bhatti & Moon 2022).
//
// The network is split into K contiguous modules (a module_chain, chain.hpp: an MLP at layer
// boundaries, a torch::nn::Sequential at named children). Module k < K-1 ends in an
// auxiliary head, a small classifier on the module's output, and learns from the head's
// cross-entropy alone: gradients never cross module boundaries (no global backpropagation,
// no backward locking), so module k can update as soon as it has run forward. The last module
// ends in the network's own output layer and needs no head. Each module body and each head
// has its own optimizer.
//
// PGL: on selected iterations the whole network takes one end-to-end backpropagation step on
// the global loss instead (heads untouched). The schedule is "every P iterations" and/or
// "during the first fraction f of the epochs" [Bhatti & Moon, ICML'22 HAET workshop, #8: the
// paper's exact schedule is not available; ours is inferred, see docs/references.md].
//
// With K = 1 a step is exactly an end-to-end step: the same forward, loss and backward calls
// on the same buffers, and the same optimizer on the whole buffer (tested bitwise).
//
// Where the state lives: the network's parameters and gradient, every head's parameters and
// gradient are buffers of `Memory` (kernels/memory.hpp), made once at construction, in the
// chain's memory space (a chain on a device, a memory of that device); the steppers take spans
// of that space (optim_stepper<Opt, Memory> keeps its optimizer state through the same
// memory). A step makes no transfer of its own: the chain computes on the buffers where they
// are and the steppers update them there. The default, serial_host_memory, is the host run.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/algorithms/decoupled/chain.hpp"
#include "heterograd/algorithms/decoupled/concepts.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/memory.hpp"
#include "heterograd/nn/mlp.hpp"

namespace heterograd::algorithms::decoupled {

/// Whose optimizer state PGL's global steps use (#50). shared: each module's own optimizer,
/// the one its local steps use (a momentum optimizer mixes the global gradient into the local
/// steps' velocity and back). own: a second optimizer per module, made by the same make_opt,
/// that only the global steps use (each step sees one kind of gradient).
enum class pgl_momentum { shared, own };
inline constexpr choice<pgl_momentum> pgl_momenta[] = {{"shared", pgl_momentum::shared}, {"own", pgl_momentum::own}};

/// PGL's global-guidance schedule.
struct pgl_schedule {
  std::size_t period = 0;       // a global step every `period` iterations (0: never)
  double epoch_fraction = 0.0;  // all steps global during the first fraction of epochs
  pgl_momentum global_momentum = pgl_momentum::shared;
  std::size_t total_epochs = 1;

  // total_epochs is the run's length, not a setting: not described.
  static constexpr auto description() {
    return describe("pgl",
                    describe_field("period", &pgl_schedule::period,
                                   "PGL: a global step every P iterations (0: never)"),
                    describe_field("epoch_fraction", &pgl_schedule::epoch_fraction,
                                   "PGL: global steps during this first fraction of epochs", closed(0, 1)),
                    describe_field("global_momentum", &pgl_schedule::global_momentum,
                                   "PGL: the global steps' optimizer state: shared with the local steps, or "
                                   "their own per module",
                                   pgl_momenta));
  }
  void validate() const {
    validate_fields(*this);
    require_positive("pgl.total_epochs", total_epochs);
  }
  bool global(std::size_t iteration, std::size_t epoch) const {
    if (period > 0 && (iteration + 1) % period == 0) return true;
    return static_cast<double>(epoch) <
           std::round(epoch_fraction * static_cast<double>(total_epochs));
  }
};

struct local_learning_config {
  module_bounds bounds;                  // empty: even_split(layers, modules)
  std::size_t modules = 2;               // K, used when bounds is empty
  std::vector<std::size_t> head_hidden;  // hidden widths of each auxiliary head ({} = linear)
  pgl_schedule pgl;                      // global guidance (default: none)
  std::uint64_t seed = 1;                // head initialisation

  // The constructor checks these (after splitting the layers into modules).
  static constexpr auto description() {
    return describe("local_learning",
                    describe_field("modules", &local_learning_config::modules,
                                   "K gradient-isolated modules (1: end-to-end backprop)", at_least(1)),
                    describe_field("head_hidden", &local_learning_config::head_hidden,
                                   "hidden widths of each auxiliary head", above(0)),
                    describe_field("pgl", &local_learning_config::pgl, "periodic global guidance"));
  }
};

template <class Opt, class Chain = mlp_chain, kernels::algorithm_memory Memory = kernels::serial_host_memory>
  requires module_chain<Chain, typename Memory::memory_space> &&
           module_optimizer<Opt, typename Memory::memory_space>
class local_learning {
 public:
  using memory_space = typename Memory::memory_space;
  using pspan = span<float, memory_space>;
  using cspan = span<const float, memory_space>;
  using buffer = typename Memory::template vector<float>;
  using step_result = basic_module_step<memory_space>;

  /// The MLP `net` split by cfg.bounds (or into cfg.modules even parts) with heads of
  /// cfg.head_hidden; `params`: its flat parameters (copied in); `make_opt(n)` returns a fresh
  /// optimizer for a slice of n parameters.
  template <class MakeOpt>
    requires std::is_same_v<Chain, mlp_chain>
  local_learning(const nn::mlp<float>& net, std::vector<float> params, local_learning_config cfg, MakeOpt make_opt,
                 Memory memory = {})
      : local_learning(mlp_chain(net, cfg.bounds, cfg.modules, cfg.head_hidden), std::move(params), cfg,
                       std::move(make_opt), std::move(memory)) {}  // cfg copied: the chain reads it in the same call

  /// Any chain (its split and heads are the chain's: cfg's bounds, modules and head_hidden are
  /// read only by the MLP constructor above). `params` (host) is uploaded once into `memory`;
  /// the chain initialises each head (initial_head below).
  template <class MakeOpt>
  local_learning(Chain chain, std::vector<float> params, local_learning_config cfg, MakeOpt make_opt,
                 Memory memory = {})
      : cfg_(std::move(cfg)), chain_(std::move(chain)), memory_(std::move(memory)) {
    require_same_size("local_learning.params", params.size(), "num_params", chain_.num_params());
    cfg_.pgl.validate();
    const std::size_t K = chain_.modules();
    require_positive("local_learning.modules", K);
    require(chain_.module_offset(0) == 0 && chain_.module_offset(K) == params.size(), "local_learning.module_offset(K)",
            chain_.module_offset(K), "must equal num_params, with module_offset(0) = 0");
    for (std::size_t k = 0; k < K; ++k)
      require(chain_.module_offset(k) < chain_.module_offset(k + 1),
              "local_learning.module_offset(" + std::to_string(k + 1) + ")", chain_.module_offset(k + 1),
              "must be strictly increasing (no module without parameters)");
    params_ = kernels::from_host(memory_, std::move(params));
    grads_ = memory_.template make<float>(params_.size(), 0.0f);
    for (std::size_t k = 0; k < K; ++k) {
      body_opt_.push_back(make_opt(slice_size(k)));
      if (cfg_.pgl.global_momentum == pgl_momentum::own) global_opt_.push_back(make_opt(slice_size(k)));
      if (k + 1 < K) {
        head_params_.push_back(initial_head(k));
        head_grads_.push_back(memory_.template make<float>(chain_.head_size(k), 0.0f));
        head_opt_.push_back(make_opt(chain_.head_size(k)));
      }
    }
  }

  std::size_t modules() const { return chain_.modules(); }
  /// The network's parameters (a buffer of the memory: std::vector on the host).
  const buffer& params() const { return params_; }
  const buffer& head_params(std::size_t k) const { return head_params_.at(k); }
  /// Module k's slice of the network parameters (what only module k's owner updates).
  pspan module_params(std::size_t k) {
    require(k < modules(), "local_learning.module", k, "must be < number of modules");
    return slice(params_, k);
  }
  /// Module k's auxiliary head parameters (k < modules() - 1).
  pspan head_params_mut(std::size_t k) { return kernels::view(memory_, head_params_.at(k)); }
  Chain& chain() { return chain_; }
  const Memory& memory() const { return memory_; }

  /// Module k's local step on `rows` inputs `x` (chain().input_width(k) floats each, in the
  /// memory's space) with host labels `y`. Touches only module k's parameters, head and
  /// optimizers, so different modules may step concurrently.
  step_result step_module(std::size_t k, const float* x, span<const std::int32_t> y) {
    require(k < modules(), "local_learning.module", k, "must be < number of modules");
    const bool head = k + 1 < modules();
    const step_result r = chain_.local_gradient(k, kernels::view(memory_, params_), x, y, kernels::view(memory_, grads_),
                                                head ? kernels::view(memory_, head_params_[k]) : pspan(),
                                                head ? kernels::view(memory_, head_grads_[k]) : pspan());
    if (head) head_opt_[k].step(kernels::view(memory_, head_params_[k]), kernels::cview(memory_, head_grads_[k]));
    body_opt_[k].step(slice(params_, k), cspan(slice(grads_, k)));
    return r;
  }

  /// One training iteration on `rows` = y.size() inputs `x` (the network's input width each,
  /// in the memory's space) with host labels `y`: the global step when the PGL schedule says
  /// so, else every module's local step in order. Returns the last module's loss (the
  /// network's).
  float step(const float* x, span<const std::int32_t> y, std::size_t iteration = 0, std::size_t epoch = 0) {
    if (cfg_.pgl.global(iteration, epoch)) return global_step(x, y);
    float loss = 0;
    for (std::size_t k = 0; k < modules(); ++k) {
      const auto r = step_module(k, x, y);
      x = r.output.data();
      loss = r.loss;
    }
    return loss;
  }
  /// Refuses, naming `key`, network inputs that are not rows x input_width(0) floats (module 0
  /// reads them through a pointer: a short batch would be read past its end).
  void check_input(std::string_view key, std::size_t floats, std::size_t rows) const {
    require_same_size(std::string(key), floats, "rows * input_width(0)", rows * chain_.input_width(0));
  }
  /// The same on a host batch (a chain on the host); its inputs must be rows x input width.
  float step(const nn::batch<float>& b, std::size_t iteration = 0, std::size_t epoch = 0)
    requires std::is_same_v<memory_space, host_space>
  {
    check_input("local_learning.batch.x", b.x.size(), b.y.size());
    return step(b.x.data(), b.y, iteration, epoch);
  }

  /// Checkpointing: the network and head parameters and every module's optimizers (with
  /// global_momentum own, the global steps' optimizers after the others), in a fixed order;
  /// `ar(...)` writes or reads them (available when the optimizers have a serialize member). The rest is workspace, overwritten before it is read, and
  /// configuration, rebuilt by the caller. The bytes are the same in every memory (buffers
  /// go through host copies). Reading fills copies and commits them only when everything was
  /// read: a checkpoint of another model (parameter or head count or size) or a damaged one
  /// throws and changes nothing.
  template <class Archive>
  void serialize(Archive& ar)
    requires requires(Opt& o) { o.serialize(ar); }
  {
    auto fields = [&](buffer& params, std::vector<buffer>& heads, std::vector<Opt>& bodies,
                      std::vector<Opt>& head_opts, std::vector<Opt>& globals) {
      kernels::archive_buffer(ar, memory_, params, "local_learning.params", chain_.num_params());
      std::uint64_t count = heads.size();
      ar(count);
      require_same_size("local_learning.heads", static_cast<std::size_t>(count), "modules - 1", heads.size());
      for (std::size_t k = 0; k < heads.size(); ++k)
        kernels::archive_buffer(ar, memory_, heads[k], "local_learning.head_params", chain_.head_size(k));
      for (auto& o : bodies) o.serialize(ar);
      for (auto& o : head_opts) o.serialize(ar);
      for (auto& o : globals) o.serialize(ar);
    };
    if constexpr (Archive::saving) {
      fields(params_, head_params_, body_opt_, head_opt_, global_opt_);
    } else {
      buffer params{};
      std::vector<buffer> heads(head_params_.size());
      auto bodies = body_opt_, head_opts = head_opt_, globals = global_opt_;
      fields(params, heads, bodies, head_opts, globals);
      // The optimizer states against the modules they update (a checkpoint of the same network
      // and heads split at other layers has states of other sizes).
      for (std::size_t k = 0; k < bodies.size(); ++k)
        check_restored(bodies[k], slice_size(k), "local_learning.module[" + std::to_string(k) + "].optimizer");
      for (std::size_t k = 0; k < head_opts.size(); ++k)
        check_restored(head_opts[k], chain_.head_size(k), "local_learning.head[" + std::to_string(k) + "].optimizer");
      for (std::size_t k = 0; k < globals.size(); ++k)
        check_restored(globals[k], slice_size(k), "local_learning.global[" + std::to_string(k) + "].optimizer");
      params_ = std::move(params);
      head_params_ = std::move(heads);
      body_opt_ = std::move(bodies);
      head_opt_ = std::move(head_opts);
      global_opt_ = std::move(globals);
    }
  }

  /// End-to-end backpropagation of the global loss on inputs `x` (memory's space) and host
  /// labels `y`; each module's slice is applied by that module's optimizer (global_momentum
  /// shared) or by its global steps' own optimizer (own).
  float global_step(const float* x, span<const std::int32_t> y) {
    const float loss = chain_.global_gradient(kernels::view(memory_, params_), x, y, kernels::view(memory_, grads_));
    std::vector<Opt>& opts = global_opt_.empty() ? body_opt_ : global_opt_;
    for (std::size_t k = 0; k < modules(); ++k) opts[k].step(slice(params_, k), cspan(slice(grads_, k)));
    return loss;
  }
  float global_step(const nn::batch<float>& b)
    requires std::is_same_v<memory_space, host_space>
  {
    check_input("local_learning.batch.x", b.x.size(), b.y.size());
    return global_step(b.x.data(), b.y);
  }

 private:
  /// A stepper's restored state against n parameters, when the stepper can check it
  /// (optim_stepper: the optimizer's own state check).
  template <class O>
  static void check_restored(const O& o, std::size_t n, const std::string& where) {
    if constexpr (requires { o.check(n, std::string_view(where)); }) o.check(n, where);
  }
  std::size_t slice_size(std::size_t k) const { return chain_.module_offset(k + 1) - chain_.module_offset(k); }
  pspan slice(buffer& v, std::size_t k) { return kernels::view(memory_, v).subspan(chain_.module_offset(k), slice_size(k)); }
  /// Head k as the chain initialises it: a host chain draws into a host vector, moved or
  /// uploaded once into the memory; a device chain draws into the buffer in place.
  buffer initial_head(std::size_t k) {
    if constexpr (std::is_same_v<memory_space, host_space>) {
      std::vector<float> h(chain_.head_size(k));
      chain_.init_head(k, span<float>(h), cfg_.seed + k);
      return kernels::from_host(memory_, std::move(h));
    } else {
      buffer b = memory_.template make<float>(chain_.head_size(k), 0.0f);
      chain_.init_head(k, kernels::view(memory_, b), cfg_.seed + k);
      return b;
    }
  }

  local_learning_config cfg_;
  Chain chain_;
  Memory memory_;
  buffer params_, grads_;
  std::vector<buffer> head_params_, head_grads_;
  std::vector<Opt> body_opt_, head_opt_;
  std::vector<Opt> global_opt_;  // global_momentum own: the global steps' optimizers; else empty
};

}  // namespace heterograd::algorithms::decoupled
