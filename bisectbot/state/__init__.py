"""The state directory: its lock, its SQLite database and the files a job keeps. The only place with SQL."""
