"""From a ref to a binary: the bot's clone and checkout, cmake configure and build, binaries kept per commit."""
