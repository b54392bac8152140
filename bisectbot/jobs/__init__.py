"""A job's life: `test`, `bisect` and `check` from plan to report, resumable; the history and gc of a state directory."""
