"""bisectbot: find the commit that changed a sampled distribution.

Data flows one way: config → commits → checkout → build → sweep → stats (sequential test)
→ verdict → search (bisect) → report → publish. See README.md for the tour.
"""

__version__ = "0.1.0"
