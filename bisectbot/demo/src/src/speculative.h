#pragma once

#include <random>
#include <vector>

// Generate exactly n tokens after the context token prev with speculative sampling.
std::vector<int> speculative_generate(int prev, int n, int draft_max, std::mt19937_64 & rng);
