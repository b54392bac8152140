# bisectbot: builds llama.cpp (or any cmake project) per commit, CPU-only, and bisects it.
FROM python:3.11-slim-bookworm

# Toolchain for the builds under test; ccache makes rebuilds across commits cheap.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake g++ make git ccache \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/bisectbot
COPY pyproject.toml README.md ./
COPY bisectbot ./bisectbot
COPY configs ./configs
COPY fixtures ./fixtures
# The package itself, from this tree (its dependencies are ranged in pyproject.toml).
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[llama]"

# State (clone, builds, database) lives in a volume so a restarted container resumes.
ENV XDG_CACHE_HOME=/var/cache/bisectbot
VOLUME ["/var/cache/bisectbot"]
# `serve --host 0.0.0.0 --port 8080` (README, GitHub: in the container); TLS stays in a proxy.
EXPOSE 8080
ENTRYPOINT ["bisectbot"]
CMD ["--help"]
