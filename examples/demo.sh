#!/usr/bin/env bash
# `make demo`: the simulator and the exporter together on loopback, with the
# webhook wired, until Ctrl-C. Both binaries must be built (make build).
set -euo pipefail
cd "$(dirname "$0")/.."

SIM_ADDR=127.0.0.1:8099
ADMIN_ADDR=127.0.0.1:8100
WEB_ADDR=127.0.0.1:9799
HOOK_ADDR=127.0.0.1:9800
SWEEP=${SWEEP:-15s}

pids=()
stop() {
	trap - INT TERM EXIT
	echo
	echo ">> stopping the simulator and the exporter"
	kill "${pids[@]}" 2>/dev/null || true
	wait "${pids[@]}" 2>/dev/null || true
}
trap stop INT TERM EXIT

./breach_simulator \
	--web.listen-address="$SIM_ADDR" \
	--api.token-file=examples/demo-secrets/DEMO_ONLY_api_token \
	--sweep.interval="$SWEEP" \
	--sweep.hold-exposed \
	--admin.listen-address="$ADMIN_ADDR" \
	--webhook.url="http://$HOOK_ADDR/webhook" \
	--webhook.secret-file=examples/demo-secrets/DEMO_ONLY_webhook_secret &
pids+=($!)

./breach_exporter \
	--config.file=examples/breach_exporter.yml \
	--web.listen-address="$WEB_ADDR" \
	--webhook.listen-address="$HOOK_ADDR" &
pids+=($!)

cat <<MSG

>> breach_exporter demo is running (Ctrl-C stops both programs)
   metrics:          http://$WEB_ADDR/metrics
   landing page:     http://$WEB_ADDR/
   simulator API:    http://$SIM_ADDR/api/v1/me   (Bearer token in examples/demo-secrets/)
   OpenAPI document: http://$SIM_ADDR/openapi.json
   alert sink:       http://$SIM_ADDR/notifications/<receiver>   (examples/alertmanager.yml posts here; logged)
   webhook receiver: http://$HOOK_ADDR/webhook   (the simulator posts signed alerts every $SWEEP)
   test controls:    http://$ADMIN_ADDR/admin/   (a feed that exposes a password changes only on demand)

   news on demand (reopens an acknowledged exposure, docs/demo.md):
         curl -s -X POST http://$ADMIN_ADDR/admin/news -d '{"email":"alice@example.com","source":"index"}'

   try:  curl -s http://$WEB_ADDR/metrics | grep -E '^breach_(source_breaches|alerts_total|address_state)'

MSG
# Stop both as soon as either exits on its own.
wait -n "${pids[@]}"
