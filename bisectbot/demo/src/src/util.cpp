#include "util.h"

#include "tables.h"

#include <cstddef>
#include <string>
#include <vector>

@@PARSE_UINT@@

int token_of(char c) {
    for (int i = 0; i < N_VOCAB; ++i) {
        if (VOCAB[i] == c) {
            return i;
        }
    }
    return -1;
}

char letter_of(int id) {
    return VOCAB[id];
}
@@HELPERS@@
