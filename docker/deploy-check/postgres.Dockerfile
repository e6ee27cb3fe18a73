# PostgreSQL from Debian's packages on the image made from the Debian archive (no Docker Hub).
ARG BASE=localhost/actsweep-base:bookworm
FROM ${BASE}
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql \
    && rm -rf /var/lib/apt/lists/*
COPY docker/deploy-check/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
CMD ["sh", "/usr/local/bin/postgres-entrypoint.sh"]
