# Multi-stage build: a static gateway binary on a small Debian base that also carries the
# tools voice and documents need (ffmpeg for transcoding, pdftotext for PDFs; add
# espeak-ng/pocketsphinx for local speech).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X gateway/cmd/internal/gatewaycli.Version=${VERSION}" -o /out/gateway ./cmd/gateway

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates ffmpeg poppler-utils curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home /data gateway \
 && mkdir -p /data && chown gateway /data
COPY --from=build /out/gateway /usr/local/bin/gateway
USER gateway
WORKDIR /data
VOLUME /data
# The container listens on every interface, so the gateway refuses to start until both tokens
# are given (the web chat and the admin endpoint have no login of their own; without them a
# published port would be an open bot on your model bill). Pass them at run time, never bake
# them into the image:
#   docker run -p 8080:8080 -v gateway-data:/data \
#     -e GATEWAY_ADMIN_TOKEN="$(openssl rand -hex 24)" \
#     -e GATEWAY_CHANNELS_WEB_TOKEN=a-password-for-the-web-chat \
#     -e OPENAI_API_KEY gateway
# Hooks and profiles are read from the data volume: /data/hooks/NAME/HOOK.yaml, /data/profiles/NAME/.
ENV GATEWAY_STATE_DIR=/data GATEWAY_HTTP_LISTEN=0.0.0.0:8080 \
    GATEWAY_HOOKS_DIRS=/data/hooks GATEWAY_PROFILES_DIR=/data/profiles
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s --start-period=20s CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["gateway"]
CMD ["run"]
