"""llama.cpp #29975 specifics: the tiny GGUF fixtures and the two exact references (numpy, server)."""
