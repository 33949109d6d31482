#pragma once
// Gradient compression: codecs (fp16, bf16, top-k, random-k, 1-bit sign with scale, PowerSGD),
// error feedback as a value, the compressed transport wrapper, and the accounting of bytes on
// the wire (recorder) and of their simulated cost (sim::network). See docs/compression.md.
#include "heterograd/compress/accounting.hpp"
#include "heterograd/compress/codec.hpp"
#include "heterograd/compress/codecs.hpp"
#include "heterograd/compress/error_feedback.hpp"
