#!/usr/bin/env bash
# Writes real session logs of upstream dsh 0.2.1 (format v4) for crates/session/tests/all/v4.rs:
# the 0.2.1 executable ($DSH2_BIN) runs each scripted scenario of ../shared/bench against the
# shared mock LLM on loopback, and every log it writes is stored decompressed as
# OUT/<scenario>-<n>.session.v4.jsonl. usage: conformance/v4-samples.sh OUT
set -euo pipefail
out=${1:?usage: conformance/v4-samples.sh OUT}
cd "$(dirname "$0")/.."
bench="../shared/bench"
[ -x "${DSH2_BIN:-}" ] || { echo "v4-samples: DSH2_BIN does not name the 0.2.1 executable" >&2; exit 1; }
[ -f "$bench/mockllm.py" ] || { echo "v4-samples: $bench/mockllm.py is absent" >&2; exit 1; }
command -v zstd >/dev/null || { echo "v4-samples: the zstd command is needed" >&2; exit 1; }
mkdir -p "$out"
work=$(mktemp -d)
trap 'kill "${mock:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
declare -A prompt=([a-hello.json]="say hello" [b-echo.json]="echo something" [c-loop20.json]="run the loop")
for scenario in a-hello.json b-echo.json c-loop20.json; do
  rm -f "$work/port"
  python3 "$bench/mockllm.py" --port 0 --port-file "$work/port" --script "$bench/scenarios/$scenario" \
    --log "$work/requests.jsonl" >/dev/null 2>&1 &
  mock=$!
  for _ in $(seq 200); do [ -s "$work/port" ] && break; sleep 0.05; done
  [ -s "$work/port" ] || { echo "v4-samples: the mock LLM did not start" >&2; exit 1; }
  home="$work/home-$scenario"; proj="$work/proj-$scenario"
  mkdir -p "$home/.dsh" "$proj"
  env -i PATH="$PATH" HOME="$home" DSH_HOME="$home/.dsh" DSH_TELEMETRY_DISABLED=1 \
    DEEPSEEK_API_KEY=sk-mock DEEPSEEK_BASE_URL="http://127.0.0.1:$(cat "$work/port")" \
    DSH_PERMISSION_MODE=danger-full-access \
    sh -c 'cd "$1" && exec "$2" headless "$3"' _ "$proj" "$DSH2_BIN" "${prompt[$scenario]}" \
    >"$work/out.txt" 2>&1 || { echo "v4-samples: 0.2.1 failed on $scenario:" >&2; tail -5 "$work/out.txt" >&2; exit 1; }
  kill "$mock"; wait "$mock" 2>/dev/null || true
  n=0
  while IFS= read -r -d '' log; do
    n=$((n + 1))
    case "$log" in
      *.zstd|*.zst) zstd -q -d -c "$log" >"$out/${scenario%.json}-$n.session.v4.jsonl" ;;
      *) cp "$log" "$out/${scenario%.json}-$n.session.v4.jsonl" ;;
    esac
  done < <(find "$home/.dsh/sessions" -type f -name 'session.v4.jsonl*' -print0)
  [ "$n" -gt 0 ] || { echo "v4-samples: 0.2.1 wrote no session log for $scenario" >&2; exit 1; }
done
echo "v4-samples: $(ls "$out" | wc -l) logs in $out"
