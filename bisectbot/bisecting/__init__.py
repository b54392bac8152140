"""The policy around the pure search: the ends checked, the line narrowed, the search, its confirmation, the report."""
