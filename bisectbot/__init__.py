"""bisectbot: find the commit that changed a sampled distribution.

Data flows one way: config → commit range → checkout → build → runs → sequential test →
verdict → bisect → report → publish. Each folder holds one idea of it, in that order (its
`__init__.py` says which); docs/inside.md gives the tour.
"""

__version__ = "0.2.0"
