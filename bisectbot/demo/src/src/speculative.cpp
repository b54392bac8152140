#include "speculative.h"

#include "sampling.h"
#include "tables.h"

#include <algorithm>

// Speculative sampling (Leviathan et al. 2023, Chen et al. 2023): the draft
// proposes, the target verifies. Accepting x with probability min(1, p(x)/q(x))
// and resampling rejections from norm(max(0, p - q)) keeps the output
// distributed exactly as the target.
@@NOTES@@
std::vector<int> speculative_generate(int prev, int n, int draft_max, std::mt19937_64 & rng) {
    std::vector<int> out;
    out.reserve(n);
    while (static_cast<int>(out.size()) < n) {
        const int n_draft = std::min(draft_max, n - static_cast<int>(out.size()));

        // draft phase: propose n_draft tokens from the draft model
        std::vector<int> draft;
        int ctx = prev;
        for (int i = 0; i < n_draft; ++i) {
            const double * q = DRAFT_PROBS[ctx];
@@DRAFT_PICK@@
            draft.push_back(id);
            ctx = id;
        }

        // verification phase: the target accepts a prefix of the draft
        ctx = prev;
        bool all_accepted = true;
        for (const int id : draft) {
            const double * p = TARGET_PROBS[ctx];
            const double * q = DRAFT_PROBS[ctx];
            if (uniform01(rng) * q[id] < p[id]) {
                out.push_back(id);
                ctx = id;
                continue;
            }
            double residual[N_VOCAB];
            for (int j = 0; j < N_VOCAB; ++j) {
                residual[j] = std::max(0.0, p[j] - q[j]);
            }
            int fixed = sample_categorical(residual, N_VOCAB, rng);
            if (fixed < 0) {
                fixed = sample_categorical(p, N_VOCAB, rng);
            }
            out.push_back(fixed);
            ctx = fixed;
            all_accepted = false;
            break;
        }

        // every proposal accepted: the target's own next token comes for free
        if (all_accepted && static_cast<int>(out.size()) < n) {
            const int bonus = sample_categorical(TARGET_PROBS[ctx], N_VOCAB, rng);
            out.push_back(bonus);
            ctx = bonus;
        }
        prev = ctx;
    }
    return out;
}
