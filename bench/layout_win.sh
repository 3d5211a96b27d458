#!/usr/bin/env bash
# bench/layout_win.sh: does the planner choose the fastest layout, and does it predict each one?
#
# For each reference model of bench/measured_win.sh (scan-heavy with a large vocabulary head,
# MoE-heavy, attention-heavy with an odd layer mix), on 2 Gloo ranks as processes:
#   1. octopipe profile  -> PREFIX.model.json + PREFIX.cluster.json (once per model)
#   2. octopipe plan     -> one plan file per layout the 2 ranks allow: PP2 (--pp=2), DP2
#                           (--dp=2), TP2 (--tp=2), EP2 (--dp=2 --ep=2, MoE models only) and the
#                           planner's own choice (no layout flag); each tuned for the steady state
#                           (`--objective=steady-state`: the executor runs iterations back to back)
#                           with the head kept whole (`--vocab_parallel=off`, as measured_win)
#   3. octopipe simulate --plan -> the prediction, made before any run
#   4. octopipe train --plan    -> every layout, interleaved (the order rotates each repeat),
#                           WARMUP + ITERS iterations, REPEATS times
# and prints one JSON line per (model, layout) (with, for data-parallel layouts, the gradient
# all-reduces' seconds per iteration as simulated and as measured), then a Markdown table: the
# layout, predicted iteration, measured iteration (median over repeats of each run's median
# after warm-up) and the fastest repeat (on a shared machine other work only slows a run
# down), the prediction's error against both, each rank's peak live activation bytes against
# the simulator's (`simulate --json`: peak_activation_bytes), and whether the planner's choice
# is the measured fastest (or within 2% of it; where the planner's plan file is a fixed
# layout's, the same plan, both sets of repeats judge it).
#
# Usage: bazel build -c opt //cli:octopipe && bench/layout_win.sh [--quick]
# Each run also times the host-speed probe before its first iteration (`train --host_probe`,
# executor/host_probe.h) and reports the prediction at the host's speed then: the profile's
# layer and CPU costs scaled by how much slower or faster the host runs than during the profile
# (on this shared VM by up to 1.5x between minutes) — also known before the run; PROBE=0 off.
# Environment: OCTOPIPE (the binary), REPEATS (3), ITERS (5), WARMUP (2), BUDGET (plan time
# budget, 3 s), PROFILE_REPEAT (8), OUT (a directory to keep the files in; default a fresh temp
# directory), ONLY (comma-separated model names, e.g. ONLY=moe-heavy), ROTATE_MS
# (`--rotate_cores_ms` for the profile and every run, 20; 0 = off).
# --quick: one small model, 1 repeat, 2 iterations (checks that the bench runs).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -z "${OCTOPIPE:-}" ]]; then
  for c in "$here/../cli/octopipe" "$here/../bazel-bin/cli/octopipe" "${BUILD_WORKSPACE_DIRECTORY:-.}/bazel-bin/cli/octopipe"; do
    if [[ -x "$c" ]]; then OCTOPIPE="$c"; break; fi
  done
fi
[[ -x "${OCTOPIPE:-}" ]] || { echo "layout_win: set OCTOPIPE to the octopipe binary" >&2; exit 2; }
PY=/usr/bin/python3
REPEATS=${REPEATS:-3}
ITERS=${ITERS:-5}
WARMUP=${WARMUP:-2}
BUDGET=${BUDGET:-3}
PROFILE_REPEAT=${PROFILE_REPEAT:-8}
ROTATE_MS=${ROTATE_MS:-20}
PROBE=${PROBE:-3}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/layout-win-XXXXXX")}
mkdir -p "$OUT"
for v in REPEATS:$REPEATS ITERS:$ITERS BUDGET:$BUDGET PROFILE_REPEAT:$PROFILE_REPEAT; do
  [[ "${v#*:}" =~ ^[1-9][0-9]*$ ]] || { echo "layout_win: ${v%%:*}='${v#*:}' is not a positive integer" >&2; exit 2; }
done
[[ "$WARMUP" =~ ^[0-9]+$ && "$ROTATE_MS" =~ ^[0-9]+$ && "$PROBE" =~ ^[0-9]+$ ]] ||
  { echo "layout_win: WARMUP='$WARMUP', ROTATE_MS='$ROTATE_MS' and PROBE='$PROBE' must be integers >= 0" >&2; exit 2; }

COMMON="heads=4,experts=4,top_k=2,state=8,expand=2,microbatches=8"
MODELS=(
  "scan-vocab|ref:pattern=MMM-MMM-MM,hidden=96,ffn=192,moe_ffn=96,seq=128,vocab=4096,$COMMON"
  "moe-heavy|ref:pattern=E-EE*EE-EE,hidden=96,ffn=192,moe_ffn=192,seq=128,vocab=512,$COMMON"
  "attention-odd|ref:pattern=**-*M***-E*,hidden=128,ffn=384,moe_ffn=128,seq=192,vocab=512,$COMMON"
)
if [[ "${1:-}" == "--quick" ]]; then
  MODELS=("quick|ref:pattern=M*E-M*,hidden=32,ffn=64,moe_ffn=32,seq=32,vocab=256,$COMMON")
  REPEATS=1 ITERS=2 WARMUP=1 BUDGET=1 PROFILE_REPEAT=3
elif [[ -n "${1:-}" ]]; then
  echo "layout_win: unknown argument '$1' (--quick or nothing)" >&2; exit 2
fi

for entry in "${MODELS[@]}"; do
  name=${entry%%|*}
  spec=${entry#*|}
  [[ -z "${ONLY:-}" || ",$ONLY," == *",$name,"* ]] || continue
  p="$OUT/$name"
  echo "layout_win: $name: profile" >&2
  "$OCTOPIPE" profile --model="$spec" --out="$p" --ranks=2 --transport=gloo --repeat="$PROFILE_REPEAT" \
    --rotate_cores_ms="$ROTATE_MS" > "$p.profile.txt"
  layouts=("pp2:--pp=2 --dp=1 --tp=1" "dp2:--pp=1 --dp=2 --tp=1 --ep=1" "tp2:--pp=1 --dp=1 --tp=2")
  [[ "${spec%%,*}" == *E* ]] && layouts+=("ep2:--pp=1 --dp=2 --tp=1 --ep=2")
  layouts+=("planner:")
  names=()
  for l in "${layouts[@]}"; do
    n=${l%%:*}
    read -r -a fixed <<< "${l#*:}"
    echo "layout_win: $name: plan + simulate $n" >&2
    if ! "$OCTOPIPE" plan --model="$p.model.json" --cluster="$p.cluster.json" "${fixed[@]}" \
        --time-budget="$BUDGET" --seed=1 --vocab_parallel=off --objective=steady-state \
        --out="$p.$n.plan.json" --json > "$p.$n.plan.out.json" 2> "$p.$n.plan.err"; then
      echo "layout_win: $name: plan $n failed: $(head -c 300 "$p.$n.plan.err")" >&2
      continue
    fi
    "$OCTOPIPE" simulate --model="$p.model.json" --cluster="$p.cluster.json" \
      --plan="$p.$n.plan.json" --json > "$p.pred.$n.json"
    names+=("$n")
  done
  n=${#names[@]}
  for ((rep = 0; rep < REPEATS; ++rep)); do
    for ((i = 0; i < n; ++i)); do
      c=${names[$(((i + rep) % n))]}
      echo "layout_win: $name: train $c (repeat $((rep + 1)) of $REPEATS)" >&2
      "$OCTOPIPE" train --model="$spec" --plan="$p.$c.plan.json" --ranks=2 --transport=gloo \
        --iterations=$((WARMUP + ITERS)) --rotate_cores_ms="$ROTATE_MS" --json \
        --profile="$p" --host_probe="$PROBE" \
        > "$p.run.$c.$rep.json" 2> "$p.run.$c.$rep.err" || echo '{}' > "$p.run.$c.$rep.json"
    done
  done
done

"$PY" - "$OUT" "$WARMUP" "$REPEATS" <<'EOF'
import json, os, re, statistics, sys
out, warmup, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ORDER = ['pp2', 'dp2', 'tp2', 'ep2', 'planner']

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}

def predicted(pred):
    """The steady-state iteration (a single pipeline's `simulate`) or the layout's iteration."""
    runs = pred.get('schedules') or [pred]
    r = runs[0] if runs else {}
    return r.get('steady_state_iteration_time_s') or r.get('iteration_time_s')

def plan_body(path):
    """A plan file without its predictions (what `plan --out` recorded of the simulation)."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k != 'predicted'}
        return [strip(v) for v in x] if isinstance(x, list) else x
    return strip(load(path))

def predicted_peaks(pred):
    """Each rank's predicted peak live activation bytes: a layout's, or a single pipeline's
    per device (its devices are the ranks)."""
    if pred.get('peak_activation_bytes'):
        return pred['peak_activation_bytes']
    runs = pred.get('schedules') or [pred]
    devices = runs[0].get('devices') if runs else None
    return [d.get('peak_activation_bytes') for d in devices] if devices else None

def layout_name(plan_out):
    l = plan_out.get('layout')
    if l:
        order = ' (pp inner)' if l.get('rank_order') == 'tp-pp-dp' else ''
        return 'PP%d x TP%d x EP%d x DP%d%s' % (l['pp'], l['tp'], l['ep'], l['dp'], order)
    return 'PP%d' % plan_out.get('plan', {}).get('num_devices', 0)

models = sorted({f.split('.')[0] for f in os.listdir(out) if f.endswith('.model.json')})
rows = []
for m in models:
    base = os.path.join(out, m)
    tokens = None
    got = {}
    for c in ORDER:
        plan_out = load(f'{base}.{c}.plan.out.json')
        if not plan_out:
            continue
        pred_file = load(f'{base}.pred.{c}.json')
        pred = predicted(pred_file)
        medians, at_speed, at_speed_errors, syncs, peaks = [], [], [], [], []
        for rep in range(repeats):
            run = load(f'{base}.run.{c}.{rep}.json')
            its = run.get('iteration_time_s') or []
            if run.get('grad_sync_s'):
                syncs.append(max(run['grad_sync_s']))
            if run.get('peak_activation_bytes'):
                peaks.append(run['peak_activation_bytes'])
            if len(its) > warmup:
                medians.append(statistics.median(its[warmup:]))
                if run.get('predicted_at_host_speed_s'):
                    at_speed.append(run['predicted_at_host_speed_s'])
                    at_speed_errors.append(at_speed[-1] / medians[-1] - 1)
        row = {'model': m, 'layout': c, 'plan': layout_name(plan_out), 'predicted_s': pred,
               'measured_median_s': statistics.median(medians) if medians else None,
               'measured_fastest_s': min(medians) if medians else None,
               'repeats': medians,
               'predicted_at_host_speed_s': statistics.median(at_speed) if at_speed else None,
               # each run against the prediction at the host speed its own probe measured
               'error_at_host_speed': (statistics.median(at_speed_errors) if at_speed_errors
                                       else None),
               # the DP gradient all-reduces per iteration: the slowest rank's sum as simulated
               # and as measured (median over repeats of the slowest rank's mean)
               'dp_sync_predicted_s': pred_file.get('dp_sync_total_s'),
               'dp_sync_measured_s': statistics.median(syncs) if syncs else None,
               # each rank's peak live activation bytes: measured (the largest over repeats)
               # and as the simulator predicts them (its peak less weights, gradients and
               # optimizer state)
               'measured_peak_activation_bytes': (
                   [max(p[r] for p in peaks) for r in range(len(peaks[0]))] if peaks else None),
               'predicted_peak_activation_bytes': predicted_peaks(pred_file)}
        mp, pp = row['measured_peak_activation_bytes'], row['predicted_peak_activation_bytes']
        row['peak_activation_error'] = (
            max(abs(m_ / p_ - 1) for m_, p_ in zip(mp, pp)) if mp and pp and len(mp) == len(pp)
            and all(p_ and p_ > 0 for p_ in pp) else None)
        for k in ('median', 'fastest'):
            v = row[f'measured_{k}_s']
            row[f'error_vs_{k}'] = pred / v - 1 if pred and v else None
        got[c] = row
    measured = {c: r['measured_median_s'] for c, r in got.items() if c != 'planner' and r['measured_median_s']}
    if 'planner' in got and measured:
        chosen = got['planner']
        same = [c for c in measured if got[c]['plan'] == chosen['plan']]
        chosen['same_as'] = same[0] if same else None
        # The planner's plan file equal to a fixed layout's (stages, schedule, ranks; the
        # predictions aside): the same plan, so its runs and that layout's are repeats of one
        # plan, and the choice is judged by all of them (the median over both sets of repeats,
        # for that layout and the choice alike) rather than by the noise between two sets.
        twin = next((c for c in same if plan_body(f'{base}.{c}.plan.json') ==
                     plan_body(f'{base}.planner.plan.json')), None)
        chosen['same_plan_as'] = twin
        m_chosen = chosen['measured_median_s']
        if twin and m_chosen:
            both = got[twin]['repeats'] + chosen['repeats']
            pooled = statistics.median(both)
            measured[twin] = m_chosen = chosen['measured_pooled_s'] = pooled
            chosen['measured_pooled_n'] = len(both)
        best = min(measured.values())
        chosen['fastest_layout'] = min(measured, key=measured.get)
        chosen['vs_fastest'] = m_chosen / best - 1 if m_chosen else None
        chosen['chosen_is_fastest_within_2pct'] = bool(m_chosen and m_chosen <= 1.02 * best)
    for c in ORDER:
        if c in got:
            rows.append(got[c])
            print(json.dumps(got[c]))

def ms(v):
    return '-' if v is None else '%.1f ms' % (v * 1e3)
def pct(v):
    return '-' if v is None else '%+.1f%%' % (v * 100)
print()
print('| model | layout | plan | predicted | measured (median / fastest) | '
      'error (median / fastest) | at host speed (error) | peak activations vs predicted | '
      'planner\'s choice |')
print('|---|---|---|---|---|---|---|---|---|')
for r in rows:
    note = ''
    if r['layout'] == 'planner':
        note = '%s; %s than the fastest (%s)%s' % (
            'fastest or within 2%' if r.get('chosen_is_fastest_within_2pct') else 'NOT within 2%',
            pct(r.get('vs_fastest')), r.get('fastest_layout'),
            '; the %s plan: judged by both sets of repeats (median of %d: %s)' % (
                r['same_plan_as'], r['measured_pooled_n'], ms(r['measured_pooled_s']))
            if r.get('same_plan_as') else '')
    peak = ('-' if r['peak_activation_error'] is None else
            'max %.1f%% off' % (100 * r['peak_activation_error']))
    print('| %s | %s | %s | %s | %s / %s | %s / %s | %s (%s) | %s | %s |' % (
        r['model'], r['layout'], r['plan'], ms(r['predicted_s']), ms(r['measured_median_s']),
        ms(r['measured_fastest_s']), pct(r['error_vs_median']), pct(r['error_vs_fastest']),
        ms(r['predicted_at_host_speed_s']), pct(r['error_at_host_speed']), peak, note))
errors = [abs(r['error_vs_median']) for r in rows if r['layout'] != 'planner' and r['error_vs_median'] is not None]
if errors:
    print()
    print('prediction error (vs median), fixed layouts: mean %.1f%%, max %.1f%%' % (
        100 * statistics.mean(errors), 100 * max(errors)))
peak_errors = [r['peak_activation_error'] for r in rows if r['peak_activation_error'] is not None]
if peak_errors:
    print('peak activation bytes per rank, measured vs predicted: %d of %d layouts exact, '
          'max %.2f%% off' % (sum(1 for e in peak_errors if e < 1e-9), len(peak_errors),
                               100 * max(peak_errors)))
at_speed = [abs(r['error_at_host_speed']) for r in rows
            if r['layout'] != 'planner' and r['error_at_host_speed'] is not None]
if at_speed:
    print('prediction error at the host speed of each run, fixed layouts: mean %.1f%%, max %.1f%%' % (
        100 * statistics.mean(at_speed), 100 * max(at_speed)))
EOF
echo "layout_win: files in $OUT" >&2
