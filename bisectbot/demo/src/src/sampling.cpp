#include "sampling.h"

double uniform01(std::mt19937_64 & rng) {
    return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

int sample_categorical(const double * w, int k, std::mt19937_64 & rng) {
    double total = 0.0;
    int last = -1;
    for (int i = 0; i < k; ++i) {
        total += w[i];
        if (w[i] > 0.0) {
            last = i;
        }
    }
    if (last < 0) {
        return -1;
    }
    const double u = uniform01(rng) * total;
    double cum = 0.0;
    for (int i = 0; i < k; ++i) {
        cum += w[i];
        if (w[i] > 0.0 && u < cum) {
            return i;
        }
    }
    return last; // rounding left u at the very top
}

int argmax(const double * w, int k) {
    int best = 0;
    for (int i = 1; i < k; ++i) {
        if (w[i] > w[best]) {
            best = i;
        }
    }
    return best;
}
