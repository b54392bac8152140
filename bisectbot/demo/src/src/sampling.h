#pragma once

#include <cstdint>
#include <random>

// Uniform double in [0, 1) from the top 53 bits of one engine draw. Spelled out
// (instead of std::uniform_real_distribution) so the stream is identical everywhere.
double uniform01(std::mt19937_64 & rng);

// Index drawn with probability proportional to the non-negative weights w[0..k).
// Returns -1 when all weights are zero.
int sample_categorical(const double * w, int k, std::mt19937_64 & rng);

// Index of the largest weight (the lowest index on ties).
int argmax(const double * w, int k);
