#!/usr/bin/env bash
# The admission layer's user cases (issue 23, BENCHMARKS.md "One admission layer"), measured with real processes (sluice mock + sluice serve)
# for one sluice binary:
#   a   a client with limits {requests_per_minute: 30} sends 15 critical requests at once
#       (a1: the client's default burst; a2: burst_seconds 1, an even pace from the start)
#   b   the primary answers 529 to every call, a same-protocol fallback is configured:
#       4 requests/s for 15 s (60 requests)
#   c   the same outage, 20 jobs submitted at once (the job door)
# Usage: admit-figures.sh BINARY OUTDIR [PORT_BASE]
# Writes OUTDIR/<case>/{config.yaml,serve.log,requests.tsv,status.txt,...} and OUTDIR/summary.txt.
set -euo pipefail
BIN=$(realpath "$1")
OUT=$(realpath -m "$2")
BASE=${3:-19100}
mkdir -p "$OUT"
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

BODY='{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}'
ADMIN=ck-ops-0123456789abcdef
ACME=ck-acme-0123456789abcdef

waitfor() { # url
	for _ in $(seq 1 200); do curl -fs -o /dev/null "$1" && return 0; sleep 0.05; done
	echo "no answer from $1" >&2; return 1
}
mock() { # port [flags...]
	local port=$1; shift
	"$BIN" mock --listen "127.0.0.1:$port" --ttft 100ms --per-token 1ms --output-min 5 --output-max 5 "$@" \
		>"$dir/mock-$port.log" 2>&1 &
	PIDS+=($!)
	waitfor "http://127.0.0.1:$port/mock/stats"
}
serve() { # config
	"$BIN" serve --config "$1" --log-format json >"$dir/serve.log" 2>&1 &
	PIDS+=($!)
	waitfor "http://127.0.0.1:$GW/livez"
}
stop_all() { cleanup; PIDS=(); }
# one request: prints "start_offset_s latency_s status queue_ms attempts upstream"
one() { # t0 key priority
	local hdr; hdr=$(mktemp)
	local start; start=$(date +%s.%N)
	local lat; lat=$(curl -s -o /dev/null -D "$hdr" -w '%{time_total}' -H 'content-type: application/json' \
		${2:+-H "x-api-key: $2"} ${3:+-H "X-Priority: $3"} -d "$BODY" "http://127.0.0.1:$GW/claude/v1/messages")
	printf '%.3f\t%s\t%s\t%s\t%s\t%s\n' "$(awk "BEGIN{print $start - $1}")" "$lat" \
		"$(awk 'NR==1{print $2}' "$hdr")" \
		"$(grep -i '^x-sluice-queue-ms:' "$hdr" | tr -d '\r' | awk '{print $2}')" \
		"$(grep -i '^x-sluice-attempts:' "$hdr" | tr -d '\r' | awk '{print $2}')" \
		"$(grep -i '^x-sluice-upstream:' "$hdr" | tr -d '\r' | awk '{print $2}')"
	rm -f "$hdr"
}

# collect waits until the case's N requests have each written their line, then
# joins them into requests.tsv under a header, sorted on column KEY.
collect() {
	local dir=$1 n=$2 key=$3
	while [ "$(cat "$dir"/req-*.tsv 2>/dev/null | wc -l)" -lt "$n" ]; do sleep 0.2; done
	printf 'start_s\tlatency_s\tstatus\tqueue_ms\tattempts\tupstream\n' >"$dir/requests.tsv"
	cat "$dir"/req-*.tsv | sort -n -k"$key" >>"$dir/requests.tsv"; rm -f "$dir"/req-*.tsv
}

case_a() { # name burst_line
	dir=$OUT/$1; mkdir -p "$dir"
	GW=$((BASE)); local M=$((BASE + 1))
	cat >"$dir/config.yaml" <<EOF
listen: 127.0.0.1:$GW
store: none
upstreams:
  - {name: claude, protocol: anthropic, base_url: "http://127.0.0.1:$M", api_key: sk-mock}
clients:
  - {name: ops, key: $ADMIN, role: admin}
  - {name: acme, key: $ACME, max_priority: critical, limits: {requests_per_minute: 30$2}}
EOF
	mock "$M"
	serve "$dir/config.yaml"
	local t0; t0=$(date +%s.%N)
	for i in $(seq 1 15); do one "$t0" "$ACME" critical >"$dir/req-$i.tsv" & done
	sleep 3
	"$BIN" status --server "http://127.0.0.1:$GW" --key "$ADMIN" >"$dir/status.txt" 2>&1 || true
	curl -s -H "x-api-key: $ADMIN" "http://127.0.0.1:$GW/v1/status" >"$dir/status.json" || true
	collect "$dir" 15 2
	stop_all
}

# start_outage writes DIR's config (store STORE; a primary on $P answering 529
# to everything, its same-protocol fallback on $B) and starts both mocks and
# the gateway on $GW.
start_outage() {
	local dir=$1 store=$2
	mkdir -p "$dir"
	cat >"$dir/config.yaml" <<EOF
listen: 127.0.0.1:$GW
store: $store
upstreams:
  - {name: claude, protocol: anthropic, base_url: "http://127.0.0.1:$P", api_key: sk-p, fallbacks: [{upstream: backup}]}
  - {name: backup, protocol: anthropic, base_url: "http://127.0.0.1:$B", api_key: sk-b}
EOF
	mock "$P" --outage 0s+1h
	mock "$B"
	serve "$dir/config.yaml"
}

case_b() {
	dir=$OUT/b; GW=$((BASE + 10)); local P=$((BASE + 11)) B=$((BASE + 12))
	start_outage "$dir" none
	local t0; t0=$(date +%s.%N)
	for i in $(seq 1 60); do one "$t0" "" "" >"$dir/req-$i.tsv" & sleep 0.25; done
	collect "$dir" 60 1
	curl -s "http://127.0.0.1:$P/mock/stats" >"$dir/primary-stats.json"
	curl -s "http://127.0.0.1:$B/mock/stats" >"$dir/backup-stats.json"
	stop_all
}

case_c() {
	dir=$OUT/c; GW=$((BASE + 20)); local P=$((BASE + 21)) B=$((BASE + 22))
	start_outage "$dir" "sqlite:$dir/sluice.db"
	local t0; t0=$(date +%s.%N)
	for i in $(seq 1 20); do
		curl -s -H 'content-type: application/json' -d "{\"upstream\":\"claude\",\"priority\":\"high\",\"request\":$BODY}" \
			"http://127.0.0.1:$GW/v1/jobs" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' >>"$dir/ids.txt"
	done
	for id in $(cat "$dir/ids.txt"); do
		while :; do
			j=$(curl -s "http://127.0.0.1:$GW/v1/jobs/$id?wait=30s")
			st=$(echo "$j" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
			case $st in succeeded|dead|canceled) break ;; esac
		done
		echo "$j" >>"$dir/jobs.jsonl"
	done
	awk "BEGIN{print $(date +%s.%N) - $t0}" >"$dir/wall_s.txt"
	curl -s "http://127.0.0.1:$P/mock/stats" >"$dir/primary-stats.json"
	stop_all
}

case_a a1 ""
case_a a2 ", burst_seconds: 1"
case_b
case_c

python3 - "$OUT" >"$OUT/summary.txt" <<'PY'
import json, sys, os, statistics
out = sys.argv[1]
def rows(path):
    with open(path) as f:
        next(f)
        return [l.rstrip("\n").split("\t") for l in f if l.strip()]
def pct(xs, p):
    xs = sorted(xs); k = max(0, min(len(xs) - 1, int(round(p / 100 * len(xs) + 0.5)) - 1)); return xs[k]
def logs(case, msg):
    out_ = []
    for l in open(os.path.join(out, case, "serve.log")):
        try: j = json.loads(l)
        except ValueError: continue
        if j.get("msg") == msg: out_.append(j)
    return out_
for case in ("a1", "a2"):
    r = rows(os.path.join(out, case, "requests.tsv"))
    lat = [float(x[1]) for x in r]
    print(f"== case {case}: 15 critical requests at once, client limit 30/min")
    print("latency_s (sorted):", " ".join(f"{x:.2f}" for x in lat))
    print("x-sluice-queue-ms (same order):", " ".join(x[3] or "-" for x in r))
    print("statuses:", sorted({x[2] for x in r}))
    q = [str(j.get("queue_ms")) for j in logs(case, "request")]
    print("request log queue_ms:", " ".join(q))
    print("sluice status at +3 s:")
    print(open(os.path.join(out, case, "status.txt")).read())
r = rows(os.path.join(out, "b", "requests.tsv"))
lat = [float(x[1]) for x in r]
print("== case b: primary 529 on every call, 60 requests at 4/s")
served = {}
for x in r: served[x[5] or "-"] = served.get(x[5] or "-", 0) + 1
print("served by (x-sluice-upstream):", served, "statuses:", sorted({x[2] for x in r}))
print("first 8 latencies_s:", " ".join(f"{float(x[1]):.2f}" for x in r[:8]))
print(f"p50 {pct(lat,50):.3f} s  p95 {pct(lat,95):.3f} s  max {max(lat):.3f} s")
print("attempts header, first 8:", " ".join(x[4] or "-" for x in r[:8]))
ls = logs("b", "request")
print("request log, first 6 (upstream served_by attempts status):")
for j in ls[:6]:
    print("  ", j.get("upstream"), j.get("served_by", "(none)"), j.get("attempts"), j.get("status"), j.get("tried", ""))
print("primary mock statuses:", json.load(open(os.path.join(out, "b", "primary-stats.json")))["overall"]["by_status"])
print("backup mock statuses:", json.load(open(os.path.join(out, "b", "backup-stats.json")))["overall"]["by_status"])
print("== case c: 20 jobs into the same outage")
js = [json.loads(l) for l in open(os.path.join(out, "c", "jobs.jsonl"))]
by = {}
for j in js:
    k = (j["state"], j.get("served_by") or j.get("response", {}).get("headers", {}).get("X-Sluice-Upstream", "-"), j["attempts"])
    by[k] = by.get(k, 0) + 1
print("(state, served_by, attempts):", by)
from datetime import datetime
ts = lambda v: datetime.fromisoformat(v.replace("Z", "+00:00"))
took = sorted((ts(j["finished_at"]) - ts(j["created_at"])).total_seconds() for j in js if j.get("finished_at"))
print("per job, submit to finished (s): min %.2f median %.2f max %.2f" % (took[0], took[len(took) // 2], took[-1]))
print("wall from first submit to last finished (the harness submits one by one):", open(os.path.join(out, "c", "wall_s.txt")).read().strip(), "s")
print("primary mock statuses:", json.load(open(os.path.join(out, "c", "primary-stats.json")))["overall"]["by_status"])
att = logs("c", "job attempt")
outc = {}
for a in att: outc[(a.get("served_by"), a.get("outcome"))] = outc.get((a.get("served_by"), a.get("outcome")), 0) + 1
print("job attempt log lines (served_by, outcome):", outc)
PY
cat "$OUT/summary.txt"
