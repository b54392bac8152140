"""Records (pure data) that flow between the stages: a commit's build, runs and verdict, reports, keys, refs."""
