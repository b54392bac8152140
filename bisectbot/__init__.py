"""bisectbot: find the commit that changed a sampled distribution.

Data flows one way: config → commit range → checkout → build → runs → sequential test →
verdict → bisect → report → publish. The folders are layers (core, edges, pipeline, github);
README.md, "Inside", gives the tour.
"""

__version__ = "0.1.0"
