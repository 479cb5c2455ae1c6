#!/usr/bin/env bash
# Smoke check of the LitServe baseline: serve resnet18-tiny (or $TARGET) with LitServe's
# batcher on a free 127.0.0.1 port, wait for GET /health, POST a few concurrent requests
# in lightspeed's format ({"inputs": ...} -> {"outputs": ...}), then SIGTERM the server
# and check that it and every process it started are gone.
#
#   benchmarks/litserve/smoke.sh                 # runs setup.sh first (a no-op once set up)
#   TARGET=mlp REQUESTS=16 benchmarks/litserve/smoke.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
target="${TARGET:-resnet18-tiny}"
requests="${REQUESTS:-8}"
py="$here/.venv/bin/python"
log="$(mktemp -t litserve-smoke.XXXXXX.log)"
body="$(mktemp -t litserve-smoke.XXXXXX.json)"

"$here/setup.sh"

port="$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
url="http://127.0.0.1:$port"

descendants() {  # every process under $1, children first listed after their parent
    local child
    for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
        echo "$child"
        descendants "$child"
    done
}

server=""
family=""
cleanup() {
    if [[ -n "$server" ]] && kill -0 "$server" 2>/dev/null; then
        family="$family $(descendants "$server")"
        kill -TERM "$server" 2>/dev/null || true
        sleep 2
    fi
    for pid in $family; do
        kill -KILL "$pid" 2>/dev/null || true
    done
    rm -f "$body"
}
trap cleanup EXIT

fail() {
    echo "smoke.sh: FAIL: $*" >&2
    echo "--- server log ($log):" >&2
    tail -n 40 "$log" >&2 || true
    exit 1
}

echo "smoke.sh: serving $target with LitServe on $url (max batch 4, batch timeout 10 ms)"
"$py" "$here/app.py" "$target" --max-batch-size 4 --batch-timeout 0.01 --port "$port" \
    --threads 1 --workers 1 >"$log" 2>&1 &
server=$!

started=$SECONDS
until [[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/health" || true)" == "200" ]]; do
    kill -0 "$server" 2>/dev/null || fail "the server exited before it was ready"
    (( SECONDS - started < 180 )) || fail "not ready after 180 s"
    sleep 0.5
done
echo "smoke.sh: /health is 200 after $(( SECONDS - started )) s"

family="$(descendants "$server")"
echo "smoke.sh: processes:"
ps -o pid=,ppid=,nlwp=,args= -p "$server,$(echo $family | tr ' ' ',')" | cut -c1-150 | sed 's/^/    /'
if ss -ltn 2>/dev/null | grep -q "0.0.0.0:$port\b"; then
    fail "listening on 0.0.0.0:$port, not 127.0.0.1 alone"
fi

"$py" "$here/app.py" "$target" --print-request >"$body"
"$py" - "$url/predict" "$body" "$requests" <<'PY' || fail "requests"
import concurrent.futures, json, sys, urllib.request

url, body_path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = open(body_path, "rb").read()


def post(_):
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, json.loads(response.read())


with concurrent.futures.ThreadPoolExecutor(n) as pool:
    answers = list(pool.map(post, range(n)))
for status, answer in answers:
    assert status == 200, status
    # A list (one sample's row); a number where the model gives one per sample.
    assert isinstance(answer.get("outputs"), (list, float, int)), answer
first = answers[0][1]["outputs"]
shape = f"a list of {len(first)}" if isinstance(first, list) else type(first).__name__
sizes = sorted(a["batch_size"] for _, a in answers)
print(f"smoke.sh: {n} requests answered 200; outputs: {shape}; batch sizes {sizes}")
PY

# Bad input: a clear 422, and the server still answers afterwards.
status="$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{"inputs": [1, 2]}' "$url/predict")"
[[ "$status" == "422" ]] || fail "a wrongly shaped input got HTTP $status, not 422"

family="$(descendants "$server")"
kill -TERM "$server"
stopped=$SECONDS
while kill -0 "$server" 2>/dev/null; do
    (( SECONDS - stopped < 60 )) || fail "still running 60 s after SIGTERM"
    sleep 0.2
done
wait "$server" || fail "the server exited with status $? after SIGTERM"
server=""
alive() {
    local pid
    for pid in $family; do
        if kill -0 "$pid" 2>/dev/null; then echo "$pid"; fi
    done
}
waited=$SECONDS
while [[ -n "$(alive)" ]] && (( SECONDS - waited < 10 )); do
    sleep 0.2
done
left="$(alive | paste -sd, -)"
[[ -z "$left" ]] || fail "processes left 10 s after the server exited: $(ps -o pid=,args= -p "$left" | cut -c1-120)"
echo "smoke.sh: stopped by SIGTERM in $(( SECONDS - stopped )) s; no process left. OK"
rm -f "$log"
