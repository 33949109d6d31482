// The C++ side of the ctypes example: the same optimizer steps through heterograd's C++ API
// (optim::adam / adamw on spans), so the Python result can be compared with it bitwise.
//
//   hg-adam-reference <float32|float64> <n> <steps> <in> <out> <lr> <beta1> <beta2> <eps> <wd>
//                     [adamw]
// <in> holds n parameters followed by steps gradients of n elements (raw, native byte order);
// <out> receives the n parameters after the steps.
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/optim/optimizers.hpp"

namespace hg = heterograd;

template <class T>
int run(char** argv, bool decoupled) {
  const std::size_t n = std::stoull(argv[2]), steps = std::stoull(argv[3]);
  std::vector<T> p(n), g(n * steps);
  std::ifstream in(argv[4], std::ios::binary);
  in.read(reinterpret_cast<char*>(p.data()), static_cast<std::streamsize>(n * sizeof(T)));
  in.read(reinterpret_cast<char*>(g.data()), static_cast<std::streamsize>(g.size() * sizeof(T)));
  if (!in) throw std::runtime_error(std::string("cannot read ") + argv[4]);
  const hg::optim::adam_config a{.lr = std::stod(argv[6]),
                                                        .beta1 = std::stod(argv[7]),
                                                        .beta2 = std::stod(argv[8]),
                                                        .eps = std::stod(argv[9]),
                                                        .weight_decay = std::stod(argv[10])};
  auto go = [&](const auto& opt) {
    auto st = opt.init(hg::exec::default_policy(), p);
    for (std::size_t s = 0; s < steps; ++s)
      opt.update(hg::exec::default_policy(), hg::span<const T>(g.data() + s * n, n), st,
                 hg::span<T>(p));
  };
  if (decoupled) go(hg::optim::adamw(a));
  else go(hg::optim::adam(a));
  std::ofstream out(argv[5], std::ios::binary);
  out.write(reinterpret_cast<const char*>(p.data()), static_cast<std::streamsize>(n * sizeof(T)));
  return out ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc != 11 && argc != 12) {
    std::cerr << "usage: hg-adam-reference <float32|float64> <n> <steps> <in> <out> <lr> <beta1> "
                 "<beta2> <eps> <wd> [adamw]\n";
    return 2;
  }
  try {
    const bool decoupled = argc == 12 && std::string(argv[11]) == "adamw";
    return std::string(argv[1]) == "float64" ? run<double>(argv, decoupled)
                                             : run<float>(argv, decoupled);
  } catch (const std::exception& e) {
    std::cerr << "hg-adam-reference: " << e.what() << "\n";
    return 1;
  }
}
