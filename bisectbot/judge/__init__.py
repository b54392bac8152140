"""From a binary to a verdict: runs over seeds, parsed, tested against the reference (on this machine or a cluster)."""
