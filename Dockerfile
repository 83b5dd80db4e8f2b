# syntax=docker/dockerfile:1
#
# fleetmux: one image for the controller and the node agent.
#
#   docker build -t fleetmux .
#   docker run --rm fleetmux --help
#
# See docker-compose.yml for a controller (with embedded NATS) and three nodes.

# ---- build ----
FROM golang:1.26 AS build
WORKDIR /src
ENV GOTOOLCHAIN=local CGO_ENABLED=0
# Modules first, so that source edits reuse this layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
RUN go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/fleetmux ./cmd/fleetmux \
    && /out/fleetmux --help >/dev/null

# ---- runtime ----
FROM debian:bookworm-slim
# The shells sessions run (bash with shell integration, zsh), ps & co for people who
# attach, CA certificates for TLS to NATS, and tini to reap the sessions' orphans.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        bash zsh procps ca-certificates tini \
    && rm -rf /var/lib/apt/lists/*
# An unprivileged user with a real home: the sessions' shells run as this user,
# and a session's default cwd is its home. /data is the data directory (session
# ids, recordings; the controller's embedded NATS store), owned by that user so a
# fresh named volume mounted there is too.
RUN groupadd --gid 10001 fleetmux \
    && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/fleetmux --shell /bin/bash fleetmux \
    && install -d -o fleetmux -g fleetmux -m 0700 /data
COPY --from=build /out/fleetmux /usr/local/bin/fleetmux
USER fleetmux:fleetmux
WORKDIR /home/fleetmux
ENV HOME=/home/fleetmux SHELL=/bin/bash LANG=C.UTF-8 TERM=xterm-256color
VOLUME ["/data"]
# 7070 HTTP API, 4222 NATS (controller --nats-listen), 7946 gossip (TCP and UDP),
# 2222 SSH front door.
EXPOSE 7070 4222 7946 7946/udp 2222
ENTRYPOINT ["tini", "--", "fleetmux"]
CMD ["--help"]
