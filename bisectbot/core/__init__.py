"""The pure core of a bisect: the search over an oracle and the decisions around it. No I/O here."""
