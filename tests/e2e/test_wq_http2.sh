#!/usr/bin/env bash
# wq.http and HTTP/2: nginx (scripts/deps.sh) serves HTTP/2 over TLS (a
# self-signed certificate) and HTTP/1.1 in clear, answering each request
# with its connection's number and protocol; tests/e2e/lua/http_h2.lua
# checks that concurrent requests multiplex on one HTTP/2 connection.
. "$(dirname "$0")/lib.sh"

NGINX=$(command -v nginx || echo /usr/sbin/nginx)
if [ ! -x "$NGINX" ] || ! command -v openssl >/dev/null; then
    fail "nginx and openssl are needed (bash scripts/deps.sh)"
    finish
fi
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=localhost -keyout "$TMP/key.pem" -out "$TMP/cert.pem" >/dev/null 2>&1 ||
    fail "openssl could not make a certificate"
mkdir -p "$TMP/nginx/logs"

# free_port: a port nothing listens on now
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

for _ in 1 2 3; do
    WQ_H2_PORT=$(free_port)
    WQ_H1_PORT=$(free_port)
    # One process (no worker left behind when it is killed), as who we are.
    cat >"$TMP/nginx/nginx.conf" <<CONF
master_process off;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/logs/error.log;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path $TMP/nginx/body;
    proxy_temp_path $TMP/nginx/proxy;
    fastcgi_temp_path $TMP/nginx/fastcgi;
    uwsgi_temp_path $TMP/nginx/uwsgi;
    scgi_temp_path $TMP/nginx/scgi;
    server {
        listen 127.0.0.1:$WQ_H2_PORT ssl http2;
        listen 127.0.0.1:$WQ_H1_PORT;
        ssl_certificate $TMP/cert.pem;
        ssl_certificate_key $TMP/key.pem;
        location / {
            default_type text/plain;
            return 200 "\$connection \$server_protocol\n";
        }
    }
}
CONF
    "$NGINX" -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" -g 'daemon off;' \
        >"$TMP/nginx.out" 2>"$TMP/nginx.err" &
    NGINX_PID=$!
    PIDS+=("$NGINX_PID")
    for _ in $(seq 100); do
        curl -s -m 1 "http://127.0.0.1:$WQ_H1_PORT/" >/dev/null && break
        sleep 0.05
    done
    curl -s -m 1 "http://127.0.0.1:$WQ_H1_PORT/" >/dev/null && break
done
export WQ_H2_PORT WQ_H1_PORT
unset http_proxy https_proxy HTTPS_PROXY all_proxy ALL_PROXY no_proxy NO_PROXY
answers() { curl -s -m 2 -o /dev/null "http://127.0.0.1:$WQ_H1_PORT/"; }
check "nginx answers: $(cat "$TMP/nginx.err" "$TMP/nginx/logs/error.log" 2>/dev/null)" answers

run --quiet "$E2E_DIR/lua/http_h2.lua"
expect_rc 0 "http_h2.lua"
expect_in "$OUT" "checks passed" "http_h2.lua finished"
printf '%s\n' "$OUT" | grep 'burst:'

kill -TERM "$NGINX_PID" 2>/dev/null
wait_exit "$NGINX_PID" 10
finish
