#pragma once

#include <string>

// Parse a whole string as a non-negative integer; false on anything else.
bool parse_uint(const std::string & s, unsigned long long & out);

// Token id of a vocabulary letter, or -1.
int token_of(char c);

// Vocabulary letter of a token id.
char letter_of(int id);
