"""Child processes: the one place that starts them, the jail every run starts in, the sandbox for untrusted code."""
