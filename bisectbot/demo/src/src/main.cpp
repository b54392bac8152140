#include "sampling.h"
#include "speculative.h"
#include "util.h"
#include "version.h"

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
@@HOOK_INCLUDES@@
static void usage(const char * argv0) {
    std::fprintf(stderr, "usage: %s --seed N --prompt STR -n N [--draft-max N]\n", argv0);
}

int main(int argc, char ** argv) {
    unsigned long long seed = 0;
    unsigned long long n_predict = 4;
    unsigned long long draft_max = 3;
    std::string prompt;

    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--version") {
            std::printf("specdemo %s\n", SPECDEMO_VERSION);
            return 0;
        }
        if (arg == "-h" || arg == "--help") {
            usage(argv[0]);
            return 0;
        }
        if (i + 1 >= argc) {
            std::fprintf(stderr, "error: missing value for %s\n", arg.c_str());
            usage(argv[0]);
            return 2;
        }
        const std::string value = argv[++i];
        bool ok = true;
        if (arg == "--seed" || arg == "-s") {
            ok = parse_uint(value, seed);
        } else if (arg == "-n" || arg == "--n-predict") {
            ok = parse_uint(value, n_predict) && n_predict <= 1000000;
        } else if (arg == "--draft-max") {
            ok = parse_uint(value, draft_max) && draft_max <= 1000;
        } else if (arg == "--prompt" || arg == "-p") {
            prompt = value;
        } else {
            std::fprintf(stderr, "error: unknown argument %s\n", arg.c_str());
            usage(argv[0]);
            return 2;
        }
        if (!ok) {
            std::fprintf(stderr, "error: bad value for %s: %s\n", arg.c_str(), value.c_str());
            return 2;
        }
    }

    if (prompt.empty()) {
        std::fprintf(stderr, "error: --prompt must be non-empty\n");
        return 2;
    }
    for (const char c : prompt) {
        if (token_of(c) < 0) {
            std::fprintf(stderr, "error: prompt letter '%c' is not in the vocabulary\n", c);
            return 2;
        }
    }
@@HOOKS@@
    std::mt19937_64 rng(seed);
    const std::vector<int> tokens = speculative_generate(
        token_of(prompt.back()), static_cast<int>(n_predict), static_cast<int>(draft_max), rng);

    std::string text = prompt;
    for (const int id : tokens) {
        text += letter_of(id);
    }
    std::printf("%s\n", text.c_str());
    return 0;
}
