"""The edges: everything with a side effect outside Python — processes, SQLite, git, loopback HTTP."""
