"""Reports for people (pure): the plain-text summary for a terminal, Markdown for GitHub, an HTML page."""
