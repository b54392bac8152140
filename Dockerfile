# bisectbot: builds llama.cpp (or any cmake project) per commit, CPU-only, and bisects it.
FROM python:3.11-slim-bookworm

# Toolchain for the builds under test; ccache makes rebuilds across commits cheap; bubblewrap
# and util-linux's prlimit sandbox pull-request checks (where the container may make namespaces).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake g++ make ninja-build git ccache bubblewrap util-linux \
    && rm -rf /var/lib/apt/lists/*

# A bind-mounted checkout (`--repo /src`) belongs to the host's user, and git refuses a repository
# owned by another user ("dubious ownership"). Every repository in this container is one the
# operator mounted or the bot cloned, and the bot builds and runs its code anyway, so git's
# ownership check protects nothing here: trust them all (README: "In the container").
RUN git config --system --add safe.directory '*'

# The bot runs as an ordinary user, and the state volume (clone, builds, database, ccache) is its.
RUN useradd --no-log-init --create-home --uid 10001 --user-group bisectbot \
    && mkdir -p /var/cache/bisectbot \
    && chown bisectbot:bisectbot /var/cache/bisectbot

WORKDIR /opt/bisectbot
# The dependencies first, read from pyproject.toml alone: a change to the code reuses this layer.
COPY pyproject.toml ./
# hadolint ignore=DL3013
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# Then the package itself, without touching the dependencies installed above.
COPY README.md ./
COPY bisectbot ./bisectbot
COPY configs ./configs
COPY fixtures ./fixtures
RUN pip install --no-cache-dir --no-deps . \
    && bisectbot --version

# The bisectbot user above, by number, so that runtimes can tell it is not root.
USER 10001:10001
# State (clone, builds, database; ccache under it) lives in a volume so a restarted container resumes.
ENV XDG_CACHE_HOME=/var/cache/bisectbot
# `init --llama PROGRAM` reads the presets from here (the package does not carry them).
ENV BISECTBOT_PRESETS=/opt/bisectbot/configs/llama
VOLUME ["/var/cache/bisectbot"]
# `serve --host 0.0.0.0 --port 8080` (README, `serve`: in the container); TLS stays in a proxy.
EXPOSE 8080
ENTRYPOINT ["bisectbot"]
CMD ["--help"]
