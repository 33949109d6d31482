// heterograd-run built without LibTorch (tools/driver/torch_plugin.cpp compiled without a
// plugin, as in a build without HG_WITH_LIBTORCH): model.kind "torch" is refused with an error
// naming model.kind and saying how to build it in.
#include <boost/test/unit_test.hpp>

#include "problems.hpp"

#ifdef HG_TORCH_PLUGIN
#error "this test compiles torch_plugin.cpp without the plugin"
#endif

namespace {
bool names_model_kind(const hgrun::config_error& e) {
  const std::string what = e.what();
  return e.path() == "model.kind" && what.find("HG_WITH_LIBTORCH") != std::string::npos &&
         what.find("libtorch-dev") != std::string::npos;
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_torch_model_without_libtorch_built_in_is_refused_naming_model_kind) {
  const hgrun::experiment e;
  const hgrun::json c = hgrun::json::object();
  BOOST_CHECK_EXCEPTION((void)hgrun::make_torch_classifier(e, c, 1), hgrun::config_error, names_model_kind);
  BOOST_CHECK_EXCEPTION((void)hgrun::make_text_problem(e, c, 1), hgrun::config_error, names_model_kind);
}
