"""The pure core: outcomes, records, reports, the sequential tests and the search. No I/O here."""
