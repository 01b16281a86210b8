"""Benchmark: the second reading's bonus and bound, chosen on the assistants' own examples, never a corpus.

A spoken request the assistant would not act on is read again with the recogniser leaning toward the
assistant's words (`agent/engines/cascade/second_reading.py`). Every `--every`-th of a profile's own examples
is said by the three espeak-ng voices `heard_examples.py` uses (no corpus benchmark speaks with them), clean
or under road noise 10 dB below (alternately), heard once, and read again at each bonus. What the assistant
does with what was heard is compared with what it does with the example typed: heard as it stands, leaning
on every reading (the second reading always taken), and the second reading taken within each bound. Also
the words heard wrong and the second reading's CPU. Writes JSON.

    python -m benchmarks.phrase_bias [--bonuses 1 2 3] [--within 1 2 3 5] [--every 4] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from agent.engines.cascade.models import moonshine_recognizer
from agent.machine import machine
from agent.profiles.policies import make_policy
from agent.profiles.understanding import read_examples, vocabulary
from benchmarks.harness import wer, words
from benchmarks.heard_examples import said
from benchmarks.understanding import CORPUS, understood

SNR_DB = 10.0


def agreement(rows: list[dict[str, Any]], pick: str) -> dict[str, float]:
    """How often the reading `pick` of each row is acted on as the example typed is (in scope, out of scope),
    and its words heard wrong."""

    def share(rs: list[dict[str, Any]]) -> float:
        return round(sum(r[pick]["got"] == r["meant"] for r in rs) / max(1, len(rs)), 3)

    total = sum(len(words(r["said"])) for r in rows)
    errors = sum(wer(r["said"], r[pick]["heard"]) * len(words(r["said"])) for r in rows)
    return {
        "as_typed": share([r for r in rows if r["intent"] != "none"]),
        "out_of_scope_as_typed": share([r for r in rows if r["intent"] == "none"]),
        "wer": round(float(errors) / max(1, total), 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bonuses", nargs="+", type=float, default=[1.0, 2.0, 3.0])
    ap.add_argument("--within", nargs="+", type=float, default=[1.0, 2.0, 3.0, 5.0])
    ap.add_argument("--every", type=int, default=4, help="one example in this many")
    ap.add_argument("--profiles", nargs="+", default=list(CORPUS), choices=list(CORPUS))
    ap.add_argument("--out", type=Path, default=Path("bench-phrase-bias.json"))
    args = ap.parse_args()
    recognizer = moonshine_recognizer(False)
    result: dict[str, Any] = {"machine": machine(), "every": args.every, "snr_db": SNR_DB, "profiles": {}}
    for profile in args.profiles:
        examples = CORPUS[profile]
        biases = {b: recognizer.phrase_bias(vocabulary(examples), b) for b in args.bonuses}
        own = read_examples(examples, shared=False)[:: args.every]

        def acts(text: str, profile: str = profile) -> bool:
            return bool(text) and make_policy(profile).acts_on(text)  # a fresh policy, as `understood` uses

        rows: list[dict[str, Any]] = []
        cpu: dict[float, list[float]] = {b: [] for b in args.bonuses}
        t0 = time.monotonic()
        for n, (intent, request) in enumerate(own):
            heard = recognizer.hear(said(n, request, SNR_DB, seed=20_000), weighable=True)
            row: dict[str, Any] = {"intent": intent, "said": request, "meant": understood(profile, request)[0]}
            first = understood(profile, heard.text, heard=True)[0]
            row["first"] = {"heard": heard.text, "got": first, "acts": acts(heard.text)}
            for b, bias in biases.items():
                c0 = time.process_time()
                again = recognizer.rehear(heard, bias) or heard
                cpu[b].append((time.process_time() - c0) * 1000)
                got = understood(profile, again.text, heard=True)[0]
                gap = heard.log_prob - again.log_prob
                row[f"lean {b:g}"] = {"heard": again.text, "got": got, "gap": gap, "acts": acts(again.text)}
            rows.append(row)
            if (n + 1) % 100 == 0:
                print(f"  {profile}: {n + 1} of {len(own)} ({time.monotonic() - t0:.0f} s)", flush=True)
        figures: dict[str, Any] = {"examples": len(rows), "first": agreement(rows, "first")}
        print(f"{profile}, {len(rows)} examples: heard as it stands {figures['first']}", flush=True)
        for b in args.bonuses:
            lean = f"lean {b:g}"
            figures[lean] = agreement(rows, lean)
            figures[lean]["cpu_ms"] = {
                "median": round(float(np.median(cpu[b])), 2),
                "p95": round(float(np.percentile(cpu[b], 95)), 2),
            }
            print(f"  bonus {b:g}, every reading: {figures[lean]}", flush=True)
            for w in args.within:
                name = f"second {b:g} within {w:g}"
                for r in rows:
                    taken = not r["first"]["acts"] and r[lean]["acts"] and r[lean]["gap"] <= w  # SecondReading.read
                    r[name] = r[lean] if taken else r["first"]
                figures[name] = agreement(rows, name)
                print(f"  bonus {b:g}, second reading within {w:g}: {figures[name]}", flush=True)
        figures["rows"] = [{k: v for k, v in r.items() if not k.startswith("second")} for r in rows]
        result["profiles"][profile] = figures
        args.out.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
