"""The statistics (pure): outcomes, the reference, and the sequential tests that decide GOOD or BAD."""
