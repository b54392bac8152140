"""The stages from a planned job to its report: build, runs, reference, verdict, bisect, jobs."""
