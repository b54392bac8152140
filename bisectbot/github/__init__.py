"""Talking to GitHub: the issue client (retries, deadlines, a dry run), comment commands, result comments."""
