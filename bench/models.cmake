# The models suite's LibTorch presets (models_torch.cpp) when the torch component is built.
if(TARGET heterograd::torch)
  target_sources(hg-bench-models PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/models_torch.cpp")
  target_link_libraries(hg-bench-models PRIVATE heterograd::torch)
endif()
