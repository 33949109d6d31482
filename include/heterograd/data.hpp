#pragma once
// The data layer: datasets, the IDX reader, partitioners, samplers, synthetic problems.
#include "heterograd/data/dataset.hpp"
#include "heterograd/data/idx.hpp"
#include "heterograd/data/partition.hpp"
#include "heterograd/data/sampler.hpp"
#include "heterograd/data/synthetic.hpp"
#include "heterograd/data/text.hpp"
